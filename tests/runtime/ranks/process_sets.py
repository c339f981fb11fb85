"""Rank script: process sets on the numpy API (the engine of each set): sync, async,
grouped (fused on the set's engine), objects, barrier, roots given as ranks of the job,
a bad root and a mismatch raised on every member, join, a non-member refused, removal.
Prints one summary line per rank."""

from __future__ import annotations

from typing import Any

import numpy as np

import gcurun.runtime as hvd
from tests.helpers import Tally


def expect(tally: Tally, error: type, call: Any, *needles: str) -> None:
    try:
        call()
    except error as exc:
        text = str(exc)
        tally.ok(all(n in text for n in needles), f"{error.__name__} says {needles}: {text}")
    else:
        tally.ok(False, f"no {error.__name__} raised")


def main() -> None:
    hvd.init()
    r, p = hvd.rank(), hvd.size()
    tally = Tally(r, p)
    evens = hvd.add_process_set([k for k in range(p) if k % 2 == 0])
    odds = hvd.add_process_set([k for k in range(p) if k % 2 == 1]) if p > 1 else None
    mine = evens if r % 2 == 0 else odds
    assert mine is not None
    tally.ok(hvd.process_sets() == [hvd.global_process_set, evens] + ([odds] if odds else []),
             "the registry")
    members = mine.ranks or []
    tally.ok(mine.included() and mine.size() == len(members)
             and mine.rank() == members.index(r), "membership")
    total = float(sum(members))
    got = hvd.allreduce(np.array([float(r), 1.0]), op=hvd.Sum, name="s.sum", process_set=mine)
    tally.ok(got.tolist() == [total, len(members)], f"sync allreduce on a set: {got}")
    x = np.full(70001, float(r))        # large: the reduction routine's ring or pair
    for _ in range(3):
        x[...] = r
        hvd.allreduce_(x, op=hvd.Sum, name="s.big", process_set=mine)
        tally.ok(bool(np.all(x == total)), "large in-place allreduce on a set")
    handle = hvd.allreduce_async(np.array([r]), op=hvd.Max, name="s.max", process_set=mine)
    tally.ok(int(hvd.synchronize(handle)[0]) == members[-1], "async allreduce on a set")
    engine = mine.engine
    assert engine is not None
    fused_before = engine.executor.stats["fused"]
    results = hvd.grouped_allreduce([np.full(5, float(r)), np.full(3, 1.0)], op=hvd.Sum,
                                    name="s.group", process_set=mine)
    tally.ok(results[0].tolist() == [total] * 5 and results[1].tolist() == [len(members)] * 3,
             "grouped allreduce on a set")
    tally.ok(engine.executor.stats["fused"] >= fused_before + 2 or len(members) == 1,
             "a grouped allreduce is fused on the set's engine")
    gathered = hvd.allgather(np.array([r, r]), name="s.gather", process_set=mine)
    tally.ok(gathered.tolist() == [k for k in members for _ in range(2)], "allgather on a set")
    root = members[-1]
    got = hvd.broadcast(np.array([r]), root_rank=root, name="s.bcast", process_set=mine)
    tally.ok(got.tolist() == [root], "broadcast from a job rank of the set")
    tally.ok(hvd.broadcast_object({"from": r}, root_rank=root, process_set=mine)
             == {"from": root}, "broadcast_object on a set")
    tally.ok(hvd.allgather_object(r, process_set=mine) == members, "allgather_object on a set")
    rows = hvd.reducescatter(np.ones((len(members), 2)), op=hvd.Sum, process_set=mine)
    tally.ok(rows.tolist() == [[len(members)] * 2], "reducescatter on a set")
    hvd.barrier(process_set=mine)
    tally.ok(True, "barrier on a set")
    outsider = next((k for k in range(p) if k not in members), None)
    if outsider is not None:
        expect(tally, hvd.ArgumentError,
               lambda: hvd.broadcast(np.zeros(2), root_rank=outsider, name="s.badroot",
                                     process_set=mine),
               f"root_rank={outsider} is not a member of the process set {members}")
    if len(members) > 1:
        n = 3 + members.index(r)
        expect(tally, hvd.MismatchError,
               lambda: hvd.allreduce(np.zeros(n), op=hvd.Sum, name="s.mismatch",
                                     process_set=mine),
               "allreduce 's.mismatch'", "the shape",
               *[f"rank {k}: allreduce 's.mismatch' float64 shape ({3 + k},)"
                 for k in range(len(members))])
        got = hvd.allreduce(np.array([1.0]), op=hvd.Sum, name="s.after", process_set=mine)
        tally.ok(got.tolist() == [len(members)], "the set works on after a mismatch")
    if r == members[-1]:        # the others join first; this allreduce waits for them
        got = hvd.allreduce(np.array([1.0]), op=hvd.Sum, name="s.joining", process_set=mine)
        tally.ok(got.tolist() == [1.0], f"the joined members add nothing: {got}")
    last = hvd.join(process_set=mine)
    tally.ok(last == members[-1], f"join on a set returns the job's rank that joined last "
                                  f"({members[-1]}): {last}")
    other = odds if mine is evens else evens
    if other is not None:
        expect(tally, ValueError, lambda: hvd.allreduce(np.ones(1), process_set=other),
               "is not a member")
    got = hvd.allreduce(np.array([1.0]), op=hvd.Sum, name="job.sum")
    tally.ok(got.tolist() == [p], "the job's engine beside the sets'")
    tally.ok(hvd.remove_process_set(evens) and not hvd.remove_process_set(evens), "remove")
    if odds is not None:
        hvd.remove_process_set(odds)
    tally.ok(hvd.process_sets() == [hvd.global_process_set], "the registry after removal")
    expect(tally, ValueError, lambda: hvd.allreduce(np.ones(1), process_set=evens),
           "is not registered")
    hvd.shutdown()
    print(f"rank {r} of {p} process sets ok: {tally.count} checks", flush=True)


if __name__ == "__main__":
    main()
