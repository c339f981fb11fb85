"""The stall inspector: tensors that some ranks submitted and others did not.

Pure bookkeeping: the coordinator tells it, now and then, which tensors are waiting and
which ranks have submitted each; it answers which tensors have waited too long, and
whether the job should be shut down. It never reads a clock itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# How often (seconds) the coordinator looks at waiting tensors.
CHECK_INTERVAL = 0.1


@dataclass(frozen=True)
class Stalled:
    """A tensor that has waited ``waited`` seconds for ``missing`` ranks."""

    name: str
    op: str
    waited: float
    missing: tuple[int, ...]


def format_ranks(ranks: Iterable[int]) -> str:
    """``rank 1``, ``ranks 1, 3`` ... (at most 8 named)."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    shown = ", ".join(str(r) for r in ranks[:8])
    return f"ranks {shown}" + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def stall_warning(stalled: list[Stalled], warning_seconds: float) -> str:
    """The warning the coordinator logs: each tensor, how long, which ranks are missing."""
    lines = [f"  {s.op} {s.name!r}: waited {s.waited:.1f} s for {format_ranks(s.missing)}"
             for s in stalled[:20]]
    if len(stalled) > 20:
        lines.append(f"  ... and {len(stalled) - 20} more tensors")
    return ("gcurun stall inspector: tensors submitted by some ranks have waited more than "
            f"{warning_seconds:g} s for the others:\n" + "\n".join(lines)
            + "\nThe missing ranks may be stuck, finished, or submitting different tensors "
            "(names must match across ranks). Set GCURUN_STALL_CHECK_WARNING_SECONDS to "
            "change this warning's delay, GCURUN_STALL_CHECK_SHUTDOWN_SECONDS to stop such "
            "a job.")


class StallInspector:
    """Tracks since when each partially submitted tensor has waited."""

    def __init__(self, size: int, warning_seconds: float, shutdown_seconds: float,
                 report_seconds: float):
        self.size = size
        self.warning_seconds = warning_seconds      # 0: no warnings
        self.shutdown_seconds = shutdown_seconds    # 0: never shut down
        self.report_seconds = report_seconds        # tell every rank who is missing
        self._since: dict[str, float] = {}
        self._warned: dict[str, float] = {}
        self._reported: dict[str, tuple[int, ...]] = {}

    def observe(self, waiting: Mapping[str, tuple[str, frozenset[int]]],
                now: float) -> tuple[list[Stalled], list[Stalled], Stalled | None]:
        """``waiting`` maps each tensor not yet submitted by every rank to (op label,
        ranks that submitted it). Returns (tensors to warn about now, tensors whose missing
        ranks every rank should learn now (once each, again when the set changes), the
        tensor that shuts the job down or None)."""
        for name in [n for n in self._since if n not in waiting]:
            del self._since[name]
            self._warned.pop(name, None)
            self._reported.pop(name, None)
        warn, report, shutdown = [], [], None
        for name, (op, ready) in waiting.items():
            since = self._since.setdefault(name, now)
            waited = now - since
            missing = tuple(r for r in range(self.size) if r not in ready)
            stalled = Stalled(name, op, waited, missing)
            if self.warning_seconds and waited >= self.warning_seconds and \
                    now - self._warned.get(name, -1e18) >= self.warning_seconds:
                self._warned[name] = now
                warn.append(stalled)
            if waited >= self.report_seconds and self._reported.get(name) != missing:
                self._reported[name] = missing
                report.append(stalled)
            if self.shutdown_seconds and waited >= self.shutdown_seconds and shutdown is None:
                shutdown = stalled
        return warn, report, shutdown
