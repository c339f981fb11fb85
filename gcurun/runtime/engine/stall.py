"""The stall inspector: tensors that some ranks submitted and others did not, and ranks
that do not answer at all.

Pure bookkeeping: the coordinator tells it, now and then, which tensors are waiting and
which ranks have submitted each; it answers which tensors have waited too long, and
whether the job should be shut down. It never reads a clock itself.

A rank that does not answer (stopped by SIGSTOP, hung in native code with the engine's
thread, its host unreachable) never reaches the cycle in which the coordinator looks:
every other rank waits inside the cycle's exchange, the coordinator too. So every rank
watches its own transport instead (:class:`SilenceWatch`, fed from a thread of its
engine): a wait for the same ranks without a byte moving for the warning time is
logged naming them, and one as long as the shutdown time ends the job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gcurun.runtime.api import Blocked

# How often (seconds) the coordinator looks at waiting tensors.
CHECK_INTERVAL = 0.1

SETTINGS_HINT = ("Set GCURUN_STALL_CHECK_WARNING_SECONDS to change this warning's delay, "
                 "GCURUN_STALL_CHECK_SHUTDOWN_SECONDS to stop such a job.")


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
            "(names must match across ranks). " + SETTINGS_HINT)


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


def silence_warning(rank: int, peers: tuple[int, ...], waited: float) -> str:
    """What a rank logs when ``peers`` have not answered it for ``waited`` seconds."""
    return (f"gcurun stall inspector: rank {rank} has waited {waited:.1f} s for "
            f"{format_ranks(peers)}, which sent nothing in that time: "
            f"{_what_silence_means(peers)} " + SETTINGS_HINT)


def silence_reason(peers: tuple[int, ...], waited: float, seconds: float) -> str:
    """Why the stall inspector ends a job whose ``peers`` did not answer."""
    return (f"the stall inspector shut the job down: {format_ranks(peers)} did not answer "
            f"for {waited:.1f} s (GCURUN_STALL_CHECK_SHUTDOWN_SECONDS={seconds:g}); "
            + _what_silence_means(peers))


def _what_silence_means(peers: tuple[int, ...]) -> str:
    it = "it" if len(peers) == 1 else "they"
    return (f"{it} may be stopped (SIGSTOP, a debugger), hung, unreachable, or waiting in "
            "turn for another rank (whose own warning names that one: the rank that warns "
            "of nobody is at fault).")


class SilenceWatch:
    """Tracks how long this rank's transport has been blocked on the same peers."""

    def __init__(self, rank: int, warning_seconds: float, shutdown_seconds: float):
        self.rank = rank
        self.warning_seconds = warning_seconds      # 0: no warnings
        self.shutdown_seconds = shutdown_seconds    # 0: never shut down
        self._warned: tuple[Blocked, float] | None = None

    @property
    def interval(self) -> float:
        """How often to look: often enough to keep the delays within a quarter."""
        delays = [s for s in (self.warning_seconds, self.shutdown_seconds) if s > 0]
        return min(1.0, max(0.05, min(delays) / 4)) if delays else 0.0

    def observe(self, blocked: Blocked | None, now: float) -> tuple[str | None, str | None]:
        """What to do about ``blocked`` (the transport's current wait) at ``now``:
        (a warning to log or None, the reason to end the job for or None). A wait is
        warned of once per warning time."""
        if blocked is None or not blocked.peers:
            return None, None
        waited = now - blocked.since
        shutdown = None
        if self.shutdown_seconds and waited >= self.shutdown_seconds:
            shutdown = silence_reason(blocked.peers, waited, self.shutdown_seconds)
        warn = None
        if self.warning_seconds and waited >= self.warning_seconds:
            last = self._warned
            if last is None or last[0] != blocked or now - last[1] >= self.warning_seconds:
                self._warned = (blocked, now)
                warn = silence_warning(self.rank, blocked.peers, waited)
        return warn, shutdown
