"""Allreduce benchmark: gcurun's ring on each backend against native MPI_Allreduce.

    mpirun -np 2 python benchmarks/allreduce.py            # ring(mpi), ring(tcp), native
    gcurun -np 2 python benchmarks/allreduce.py            # ring(tcp)
    mpirun -np 2 python benchmarks/allreduce.py --max-bytes 8 --repeat 5   # 8 bytes only

Options: --backends mpi,tcp  --min-bytes 4096  --max-bytes 268435456  --rounds 5
         --seconds 0.05  --repeat 1 (the median of several passes)
"""

from __future__ import annotations

import sys

from gcurun.runtime.bench import run

if __name__ == "__main__":
    sys.stdout.write(run(sys.argv[1:]))
