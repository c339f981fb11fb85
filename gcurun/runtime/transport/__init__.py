"""Everything that moves bytes between two ranks: the tcp and mpi transports, the
one-process transport, same-host shared-memory rings and single-copy reads, and
:func:`open_transport`, which opens one for a set of ranks."""
