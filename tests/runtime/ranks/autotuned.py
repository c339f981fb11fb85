"""Rank script: STEPS training-like steps (named allreduces of several sizes, fused and
not, and an allgather), each result checked exactly against what rank and size give;
then every knob setting this rank took, in order, as one ``KNOBS <rank> <json>`` line.
Values are small whole numbers, so any order of reduction gives the same bits."""

from __future__ import annotations

import json
import sys

import numpy as np

import gcurun.runtime as hvd
from gcurun.runtime.frontend import state

SIZES = (7, 3000, 40_000, 300_000, 1_100_000)


def main() -> None:
    steps = int(sys.argv[1])
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    for step in range(steps):
        handles = []
        for i, count in enumerate(SIZES):
            x = np.full(count, float(rank + i + step % 5), np.float32)
            handles.append((i, hvd.allreduce_async(x, name=f"grad.{i}", op=hvd.Sum)))
        gathered = hvd.allgather_async(np.full((2, 3), rank, np.int32), name="rows")
        for i, handle in handles:
            out = hvd.synchronize(handle)
            want = size * (size - 1) / 2 + size * (i + step % 5)
            assert out.shape == (SIZES[i],) and np.all(out == want), (step, i, out[:3], want)
        rows = hvd.synchronize(gathered)
        assert rows.tolist() == [[r] * 3 for r in range(size) for _ in range(2)], rows
    history = state.current_state().engine.knob_history
    hvd.shutdown()
    print(f"KNOBS {rank} {json.dumps(history)}", flush=True)


if __name__ == "__main__":
    main()
