"""Where a step of the engine benchmark goes: the ring passes, split into transfers and
reductions, and the engine's work outside them.

    gcurun -np 2 python benchmarks/engine_phases.py
    GCURUN_FUSION_THRESHOLD_MB=128 gcurun -np 2 python benchmarks/engine_phases.py  # one pass

The same ResNet-50 gradients and variants as benchmarks/engine.py (``single``: one
buffer; ``views``: 161 views of one buffer, submitted async; ``fused``: 161 arrays of
their own, submitted async), one step of each in turn. Every ring pass of the engine is
timed, and inside it every message exchange (``sendrecv_parts``; the two-level
allreduce's ticks, ``sendrecv_together``; the waits of exchanges left in flight between
hosts) and every reduction (the ufunc and the averaging); the rest of the ring is its
bookkeeping, and the step's time outside the rings is the engine's: submission,
negotiation, the batch's setup, completion. The table shows each column's median over
the steps (ms), and each variant's rings against those of ``single``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine import gradients, start, submit_all  # noqa: E402

import gcurun.runtime as hvd  # noqa: E402
from gcurun.runtime.frontend import state as basics  # noqa: E402

COLUMNS = ("step", "rings", "transfers", "reductions")


class Clock:
    """Seconds spent in the ring passes, and in their transfers and reductions; and the
    engine thread's cycles (negotiation, then what was agreed), counted, with the CPU
    seconds its thread spent in them."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys((*COLUMNS[1:], "cycles", "cycle_cpu"), 0.0)

    def timing(self, column: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        spent, now = self.spent, time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = now()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[column] += now() - began

        return timed

    def install(self) -> None:
        """Time the engine's reductions (its one reduction routine) and what happens
        inside them."""
        engine = basics.state("engine_phases").engine
        cycle, spent, cpu = engine._cycle, self.spent, time.thread_time

        def counted() -> bool:
            began = cpu()
            try:
                return cycle()
            finally:
                spent["cycles"] += 1
                spent["cycle_cpu"] += cpu() - began

        engine._cycle = counted         # type: ignore[method-assign]
        executor = engine.executor
        transport = executor.t
        transport.sendrecv_parts = self.timing("transfers", transport.sendrecv_parts)
        transport.sendrecv = self.timing("transfers", transport.sendrecv)
        # The two-level allreduce's ticks (both rings at once), and the exchanges a ring
        # leaves in flight between hosts: the waits for their bytes are transfers too.
        together = getattr(transport, "sendrecv_together", None)
        if together is not None:
            transport.sendrecv_together = self.timing("transfers", together)
        start = getattr(transport, "start_sendrecv_parts", None)
        if start is not None:
            transport.start_sendrecv_parts = self._started(start)
        reducer = executor.reducer
        allreduce: Any = reducer.allreduce

        def timed(pieces: Any, ufunc: Any, finish: Any = None, phase: Any = None,
                  key: Any = None) -> None:
            allreduce(pieces, self.timing("reductions", ufunc),
                      None if finish is None else self.timing("reductions", finish), phase,
                      key)

        reducer.allreduce = self.timing("rings", timed)

    def _started(self, start: Callable[..., Any]) -> Callable[..., Any]:
        """``start_sendrecv_parts`` timed, and the exchange it leaves in flight with its
        waits timed (an exchange it could not leave in flight returns None, as before)."""
        timed_start = self.timing("transfers", start)

        def started(*args: Any, **kwargs: Any) -> Any:
            flight = timed_start(*args, **kwargs)
            return None if flight is None else _TimedFlight(flight, self.timing)

        return started


class _TimedFlight:
    """An exchange in flight (:class:`gcurun.runtime.api.InFlight`) whose waits count as
    transfers."""

    __slots__ = ("received", "wait")

    def __init__(self, flight: Any, timing: Callable[[str, Callable[..., Any]],
                                                     Callable[..., Any]]) -> None:
        self.received = timing("transfers", flight.received)
        self.wait = timing("transfers", flight.wait)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("mpi", "tcp"), default=None)
    parser.add_argument("--steps", type=int, default=30, help="steps of each variant")
    args = parser.parse_args(argv)
    start(args.backend)
    rank = hvd.rank()
    grads, flat, views, order, names = gradients(rank)

    variants: dict[str, Callable[[], object]] = {
        "single": lambda: hvd.allreduce_(flat, name="resnet50.flat"),
        "views": lambda: submit_all(views, order, names),
        "fused": lambda: submit_all(grads, order, names),
    }
    for fn in variants.values():
        fn()
        fn()
    clock = Clock()
    clock.install()
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for _ in range(args.steps):
        for name, fn in variants.items():
            hvd.barrier()
            for column in clock.spent:
                clock.spent[column] = 0.0
            began = time.perf_counter()
            fn()
            rows[name].append({"step": time.perf_counter() - began, **clock.spent})
    if rank == 0:
        print(table(rows, hvd.size()))
    hvd.shutdown()


def table(rows: dict[str, list[dict[str, float]]], size: int) -> str:
    median = {name: {column: statistics.median(row[column] for row in steps) * 1e3
                     for column in COLUMNS} for name, steps in rows.items()}
    lines = [f"# gcurun engine phases: ResNet-50 gradients, {size} ranks, backend "
             f"{hvd.backend()}, median ms of {len(rows['single'])} steps (rank 0)",
             f"# {'variant':<8} {'step':>7} {'rings':>7} {'transfers':>10} "
             f"{'reductions':>11} {'ring rest':>10} {'outside':>8} {'rings/single':>13}"]
    for name, m in median.items():
        rest = m["rings"] - m["transfers"] - m["reductions"]
        lines.append(f"  {name:<8} {m['step']:>7.2f} {m['rings']:>7.2f} "
                     f"{m['transfers']:>10.2f} {m['reductions']:>11.2f} {rest:>10.2f} "
                     f"{m['step'] - m['rings']:>8.2f} "
                     f"{m['rings'] / median['single']['rings']:>13.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
