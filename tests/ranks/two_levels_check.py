"""A rank that checks the allreduce of a job whose ranks span hosts, and says which
allreduce its engine ran. Prints one JSON line: rank, size, what was wrong (nothing, if
all went right) and the allreduce phases in its timeline.

Twice: first without a timeline (synchronous calls take the engine's quick path), then
with one (``$CHECK_DIR/timeline-{rank}.json``). Each time: single tensors of uneven
sizes (small ones are gathered, larger ones reduced by the ring or two levels), summed
exactly (int64, and float64 of integers) and averaged, out of place and in place; a
fused batch of every size at once (async, submitted in an order of the rank's own);
and a grouped allreduce.
"""

from __future__ import annotations

import json
import os
import random

import numpy as np

import gcurun.runtime as hvd
from gcurun.runtime.frontend.state import state

SIZES = [1, 3, 7, 1001, 8193, 100_003, 262_147]


def check(tag: str) -> list[str]:
    """What was wrong this round (empty: nothing)."""
    rank, size = hvd.rank(), hvd.size()
    weight = size * (size + 1) // 2         # sum over ranks of (rank + 1)
    bad: list[str] = []

    def expect(what: str, got: np.ndarray, want: np.ndarray, exact: bool = True) -> None:
        same = np.array_equal(got, want) if exact else np.allclose(got, want, rtol=1e-12)
        if not same:
            wrong = int(np.flatnonzero(got != want)[0]) if exact else -1
            bad.append(f"{tag} {what}: first wrong element {wrong} of {len(want)}")

    for count in SIZES:
        base = np.arange(count, dtype=np.int64)
        want = base * weight
        mine = base * (rank + 1)
        expect(f"int64 sum of {count}",
               hvd.allreduce(mine, op=hvd.Sum, name=f"{tag}.i.{count}"), want)
        floats = mine.astype(np.float64)
        hvd.allreduce_(floats, op=hvd.Sum, name=f"{tag}.f.{count}")
        expect(f"float64 sum in place of {count}", floats, want.astype(np.float64))
        average = hvd.allreduce(mine.astype(np.float64), name=f"{tag}.a.{count}")
        expect(f"average of {count}", average, want / size, exact=False)
    tensors = [np.arange(n, dtype=np.float64) * (rank + 1) for n in SIZES * 3]
    order = list(range(len(tensors)))
    random.Random(rank).shuffle(order)
    handles = {i: hvd.allreduce_async_(tensors[i], op=hvd.Sum, name=f"{tag}.fused.{i}")
               for i in order}
    for i in sorted(handles):
        hvd.synchronize(handles[i])
        expect(f"fused tensor {i}", tensors[i], np.arange(len(tensors[i])) * float(weight))
    group = hvd.grouped_allreduce([np.full(n, rank + 1, np.int64) for n in SIZES],
                                  op=hvd.Sum, name=f"{tag}.group")
    for n, got in zip(SIZES, group, strict=True):
        expect(f"grouped tensor of {n}", got, np.full(n, weight, np.int64))
    return bad


def phases(path: str) -> list[str]:
    with open(path) as f:
        events = json.load(f)
    return sorted({e["name"] for e in events if e.get("ph") == "X" and e["name"] != "QUEUE"
                   and not e["name"].startswith("MEMCPY")})


def main() -> None:
    hvd.init()
    bad = check("quick")
    rank = hvd.rank()
    hvd.shutdown()
    timeline = os.path.join(os.environ["CHECK_DIR"], "timeline-{rank}.json")
    os.environ["GCURUN_TIMELINE_FILENAME"] = timeline
    hvd.init()
    bad += check("traced")
    transport = state("check").transport
    streams = getattr(transport, "streams", None)        # (between its ring neighbours)
    report = {"rank": rank, "size": hvd.size(), "backend": hvd.backend(), "bad": bad,
              "streams": streams is not None and streams((rank + 1) % hvd.size(),
                                                         (rank - 1) % hvd.size())}
    hvd.shutdown()
    report["phases"] = phases(timeline.format(rank=rank))
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
