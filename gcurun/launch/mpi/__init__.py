"""The MPI executor: ``command`` (the mpirun argv of a plan for each MPI flavour) and
``rank_group`` (every rank under one mpirun, run by the remote program ``session_guard``, its
tagged output split back per rank). Each rank starts with ``remote.mpi_shim``.
"""
