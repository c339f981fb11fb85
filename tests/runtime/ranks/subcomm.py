"""Rank script (mpirun): the runtime on sub-communicators, given as an mpi4py
communicator and as a list of COMM_WORLD ranks."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

import gcurun.runtime as hvd
from tests.runtime.checks import Checks


def main() -> None:
    world = MPI.COMM_WORLD
    me = world.Get_rank()
    half = world.Split(color=me % 2, key=me)
    hvd.init(comm=half)
    assert hvd.mpi_enabled() and hvd.size() == half.Get_size() and hvd.rank() == half.Get_rank()
    count = Checks(hvd, lengths=(0, 3, 1001), big=5001).run_all()
    members = hvd.allgather(np.array([me]), name="members")
    assert members.tolist() == list(range(me % 2, world.Get_size(), 2)), members
    hvd.shutdown()
    mine = [r for r in range(world.Get_size()) if r % 2 == me % 2]
    hvd.init(comm=mine)
    total = hvd.allreduce(np.array([me]), op=hvd.Sum, name="listed")
    assert total.tolist() == [sum(mine)], total
    hvd.shutdown()
    print(f"rank {me} ok: {count} checks on a communicator of {len(mine)}", flush=True)


if __name__ == "__main__":
    main()
