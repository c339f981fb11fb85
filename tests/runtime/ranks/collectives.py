"""Rank script: every collective and dtype, the mismatch errors, then shutdown and init
again (a second generation). Prints one summary line per rank."""

from __future__ import annotations

import sys

import numpy as np

import gcurun.runtime as hvd
from tests.runtime.checks import Checks


def main() -> None:
    big = int(sys.argv[1]) if len(sys.argv) > 1 else 20001
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    where = (f"backend={hvd.backend()} local={hvd.local_rank()}/{hvd.local_size()} "
             f"cross={hvd.cross_rank()}/{hvd.cross_size()}")
    count = Checks(hvd, big=big).run_all()
    hvd.shutdown()
    assert not hvd.is_initialized()
    hvd.init()
    again = hvd.allreduce(np.array([rank, 1]), op=hvd.Sum, name="generation.2")
    assert again.tolist() == [size * (size - 1) // 2, size], again
    hvd.shutdown()
    print(f"rank {rank} of {size} ok: {count} checks, {where}", flush=True)


if __name__ == "__main__":
    main()
