"""The plain data the elastic driver keeps: hosts, workers, generations and failures.

:mod:`.events` holds what goes in and out of the driver, :mod:`.driver` the decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Phase = Literal["waiting", "forming", "running", "reforming", "finishing", "done"]
WorkerState = Literal["starting", "parked", "member", "removed", "exited"]


@dataclass(frozen=True)
class Assignment:
    """One rank of a generation."""

    worker: int
    host: str
    slot: int
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int


@dataclass(frozen=True)
class Generation:
    number: int
    members: tuple[Assignment, ...]     # by rank
    sync: bool
    cause: str

    @property
    def workers(self) -> tuple[int, ...]:
        return tuple(a.worker for a in self.members)

    def of(self, worker: int) -> Assignment | None:
        for a in self.members:
            if a.worker == worker:
                return a
        return None


@dataclass
class HostRecord:
    """One host ever seen, in first-seen order."""

    name: str
    slots: int
    listed: bool = True
    blacklisted: bool = False
    blacklist_count: int = 0
    cooldown_until: float = 0.0
    reason: str = ""


@dataclass
class Worker:
    """One process ever started; its identity is (host, slot)."""

    id: int
    host: str
    slot: int
    started: float
    state: WorkerState = "starting"
    code: int | None = None
    signal: int | None = None


@dataclass(frozen=True)
class Failure:
    """How a worker failed: the root cause of a failed job is the earliest."""

    now: float
    worker: int
    host: str
    code: int | None
    signal: int | None
    text: str

    @property
    def job_exit_code(self) -> int:
        if self.signal is not None:
            return 128 + self.signal
        return self.code if self.code else 1

    def describe(self) -> str:
        return f"worker {self.worker} on {self.host} " \
               f"{describe_exit(self.code, self.signal, self.text)}"


def describe_exit(code: int | None, signal: int | None, text: str = "") -> str:
    """How a process ended, as the end of a sentence: killed by ``signal``, exited with
    ``code``, or ``text`` (``"was lost"`` when empty) when neither is known."""
    if signal is not None:
        return f"was killed by signal {signal}"
    if code is not None:
        return f"exited with code {code}"
    return text or "was lost"
