"""Pure parsing of where ranks run: host specs, hostfiles, Slurm hostlists, topology."""
