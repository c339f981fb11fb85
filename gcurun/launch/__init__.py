"""From settings and a command to running ranks: ``prepare`` (plan, SSH preflight,
binding), then ``execute`` (rendezvous, the executor's rank groups, supervision); the CLI
and ``gcurun.run`` (``library``) both call them. Subpackages by role: ``planning``,
``ssh``, ``mpi``, ``supervision`` and ``remote`` (the stdlib-only programs run on the
ranks' hosts); ``local_group`` is the local executor. Imports nothing: the remote programs
load this package on every host.
"""
