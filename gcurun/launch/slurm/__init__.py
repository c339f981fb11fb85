"""The Slurm executor: every rank of a plan started by one ``srun`` step inside the
allocation gcurun runs in (``gcurun --slurm``).

``command`` builds the srun argv and environment from the plan and reads srun's output
and failure messages (pure); ``prepare`` checks the allocation, ``--mpi=pmix`` and reads
the nodes' topology for binding; ``rank_group`` runs and stops the step.
"""
