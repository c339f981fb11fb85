"""Programs that run on the ranks' hosts, standard library only.

``bootstrap`` (one per SSH host and job, speaking ``protocol``), ``mpi_shim`` (first on
every mpirun rank), ``rank_env`` (the rank environment contract) and ``run_function`` (a
rank of ``gcurun.run``) run with gcurun on ``sys.path``; ``bind_exec`` and ``session_guard``
run by file path and import nothing from gcurun. They are the single home of what they
share with the launcher, which imports them from here.
"""
