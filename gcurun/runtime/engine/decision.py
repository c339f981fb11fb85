"""What a negotiation cycle decides (the same on every rank), and the error for ranks
whose engines fell out of step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gcurun.runtime.api import CollectiveError
from gcurun.runtime.engine.requests import Agreed


class ProtocolError(CollectiveError):
    """The ranks' engines fell out of step: a bug, or ranks of different gcurun versions."""


@dataclass
class CycleDecision:
    """What one cycle decided, the same on every rank."""

    ready: list[Agreed] = field(default_factory=list)       # in execution order
    errors: list[tuple[str, CollectiveError]] = field(default_factory=list)
    joined: frozenset[int] = frozenset()
    join_done: int | None = None            # all ranks joined; the last one to join
    shutdown: str | None = None             # 'rank N': the first rank shutting down
    stalled: str | None = None              # the stall inspector shut the job down
    inline: Agreed | None = None            # the ready op whose data rode in the blocks
    # Rank 0's autotune: the knobs every rank takes in this cycle, before running its ops
    knobs: dict[str, Any] | None = None
