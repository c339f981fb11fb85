"""From settings and a command to running ranks: ``prepare`` (plan, the launcher kind's
preflight and binding), then ``execute`` (rendezvous, the kind's rank groups,
supervision); the CLI, ``gcurun.run`` (``library``) and the elastic driver (``elastic``)
call them. ``kinds`` holds the launcher kind interface, its registry (local, ssh, mpi,
slurm) and the prepared job record; each kind lives beside its rank group: ``local_group``,
``ssh``, ``mpi``, ``slurm``. ``bootstrap_group`` is the lifecycle the local and SSH groups
share, ``guarded_group`` the one of the mpirun and srun groups. Below them: ``api`` (plan
records, events, the rank-group protocol), ``planning``, ``supervision`` and ``remote``
(the stdlib-only programs run on the ranks' hosts). Imports nothing: the remote programs
load this package on every host.
"""
