"""From a plan to running ranks: planning (pure), executors (local, ssh, mpi), supervision."""
