"""Reading an engine trace back: where the time went, per activity and per tensor.

:func:`parse_trace` is pure (text in, events out) and accepts a trace whose closing
bracket is missing (traces written by other tools may end that way);
:func:`summarize` turns events into a :class:`TraceSummary`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcurun.errors import UsageError

OPS = ("ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL", "REDUCESCATTER", "BARRIER")


@dataclass(frozen=True)
class Activity:
    name: str
    count: int
    total_us: float


@dataclass(frozen=True)
class TensorCost:
    name: str
    op: str
    count: int              # how many times the op ran
    op_us: float            # time inside the op spans
    negotiate_us: float     # time from first submission to ready everywhere


@dataclass(frozen=True)
class TraceSummary:
    events: int
    span_us: float
    cycles: int
    activities: tuple[Activity, ...]     # costliest first
    tensors: tuple[TensorCost, ...]      # costliest op time first
    truncated: bool                      # the writer hit its size cap


def parse_trace(text: str, source: str = "trace") -> list[dict[str, Any]]:
    """The events of a Chrome trace: a JSON array, or an object with ``traceEvents``."""
    stripped = text.strip()
    try:
        data = json.loads(stripped)
    except ValueError:
        try:
            data = json.loads(stripped.rstrip(",") + "]")
        except ValueError:
            raise UsageError(f"{source}: not a Chrome trace (JSON array of events); give "
                             "the file GCURUN_TIMELINE_FILENAME named") from None
    if isinstance(data, dict):
        data = data.get("traceEvents")
    if not isinstance(data, list) or not all(isinstance(e, dict) for e in data):
        raise UsageError(f"{source}: not a Chrome trace (JSON array of events); give the "
                         "file GCURUN_TIMELINE_FILENAME named")
    return data


def read_trace(path: str | Path) -> list[dict[str, Any]]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the trace ({exc.strerror})") from None
    return parse_trace(text, str(path))


def summarize(events: list[dict[str, Any]]) -> TraceSummary:
    """Totals per activity (nested spans count in their own right) and per tensor."""
    rows = {e["pid"]: e.get("args", {}).get("name", str(e["pid"])) for e in events
            if e.get("ph") == "M" and e.get("name") == "process_name"}
    activity: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    op_time: dict[str, list[Any]] = defaultdict(lambda: ["", 0, 0.0, 0.0])
    open_: dict[tuple[Any, Any], list[tuple[str, float]]] = defaultdict(list)
    stamps = [float(e["ts"]) for e in events if "ts" in e]
    for event in sorted((e for e in events if "ts" in e), key=lambda e: float(e["ts"])):
        phase, ts = event.get("ph"), float(event["ts"])
        key = (event.get("pid"), event.get("tid"))
        if phase == "X":
            _add(activity, event["name"], float(event.get("dur", 0)))
        elif phase == "B":
            open_[key].append((event["name"], ts))
        elif phase == "E" and open_[key]:
            name, began = open_[key].pop()
            _add(activity, name, ts - began)
            tensor = rows.get(event.get("pid"), str(event.get("pid")))
            cost = op_time[tensor]
            if name.startswith("NEGOTIATE"):
                cost[3] += ts - began
            else:
                cost[0], cost[1], cost[2] = name, cost[1] + 1, cost[2] + ts - began
    activities = sorted((Activity(n, int(c), t) for n, (c, t) in activity.items()),
                        key=lambda a: -a.total_us)
    tensors = sorted((TensorCost(n, op, count, us, neg) for n, (op, count, us, neg)
                      in op_time.items() if count), key=lambda t: -t.op_us)
    return TraceSummary(
        events=len(events),
        span_us=max(stamps) - min(stamps) if stamps else 0.0,
        cycles=sum(1 for e in events if e.get("name") == "CYCLE_START"),
        activities=tuple(activities),
        tensors=tuple(tensors),
        truncated=any(e.get("name") == "TIMELINE_SIZE_CAP_REACHED" for e in events),
    )


def _add(table: dict[str, list[float]], name: str, us: float) -> None:
    entry = table[name]
    entry[0] += 1
    entry[1] += us


def format_summary(summary: TraceSummary, top: int = 10) -> str:
    """The report ``gcurun timeline summary`` prints."""
    lines = [f"{summary.events} events over {summary.span_us / 1e6:.3f} s"
             + (f", {summary.cycles} engine cycles" if summary.cycles else "")
             + (" (the trace hit its size cap and stops early)" if summary.truncated
                else ""),
             "", "Spans are per tensor: the tensors of one fused batch share its time.",
             f"{'activity':<28} {'count':>8} {'total ms':>11} {'mean us':>10}"]
    for a in summary.activities:
        lines.append(f"{a.name:<28} {a.count:>8} {a.total_us / 1e3:>11.3f} "
                     f"{a.total_us / max(a.count, 1):>10.1f}")
    lines += ["", f"costliest tensors (top {min(top, len(summary.tensors))} of "
              f"{len(summary.tensors)})",
              f"{'tensor':<40} {'op':<14} {'runs':>5} {'op ms':>10} {'negotiate ms':>13}"]
    for t in summary.tensors[:top]:
        name = t.name if len(t.name) <= 40 else t.name[:37] + "..."
        lines.append(f"{name:<40} {t.op:<14} {t.count:>5} {t.op_us / 1e3:>10.3f} "
                     f"{t.negotiate_us / 1e3:>13.3f}")
    return "\n".join(lines)
