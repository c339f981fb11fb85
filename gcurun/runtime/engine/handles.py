"""The handles a caller gets for submitted ops, and the error for a bad one."""

from __future__ import annotations

from gcurun.errors import CollectiveError
from gcurun.runtime.engine.requests import Op


class HandleError(CollectiveError, ValueError):
    """A handle that is unknown or already synchronized, or a name submitted twice."""


class Handle:
    """What a caller waits for: one op, or the ops of a grouped call."""

    __slots__ = ("ops", "grouped")

    def __init__(self, ops: list[Op], grouped: bool):
        self.ops = ops
        self.grouped = grouped

