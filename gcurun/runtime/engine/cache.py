"""The response cache: the agreed op of each name negotiated before, in numbered slots
that are the same on every rank (see :mod:`gcurun.runtime.engine.negotiation`)."""

from __future__ import annotations

import heapq
from collections import OrderedDict

from gcurun.runtime.engine.requests import Agreed


class ResponseCache:
    """Agreed ops by name in numbered slots, least recently used evicted first. Every
    rank makes the same calls in the same order, so slots match across ranks."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.by_name: dict[str, tuple[int, Agreed]] = {}
        self.by_slot: list[Agreed | None] = [None] * capacity
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._free = list(range(capacity))
        self.epoch = 0
        self.newest: str | None = None      # the name used last (touch it: nothing moves)
        self.enabled = True                 # off: nothing is cached (autotune's knob)

    def enable(self, enabled: bool) -> None:
        """Cache agreements again, or forget them all and cache none (every rank at the
        same point of the same cycle, so the slots stay alike)."""
        if not enabled:
            for name in [entry.name for entry in self.by_slot if entry is not None]:
                self.evict(name)
        self.enabled = enabled

    def get(self, name: str) -> tuple[int, Agreed] | None:
        return self.by_name.get(name)

    def put(self, agreed: Agreed) -> None:
        if not self.capacity or not self.enabled:
            return
        old = self.by_name.get(agreed.name)
        if old is not None:
            if old[1] == agreed:
                self.touch(agreed.name)
                return
            self.evict(agreed.name)
        if not self._free:
            self.evict(next(iter(self._recent)))
        slot = heapq.heappop(self._free)
        self.by_name[agreed.name] = (slot, agreed)
        self.by_slot[slot] = agreed
        self._recent[agreed.name] = None
        self.newest = agreed.name
        self.epoch += 1

    def evict(self, name: str) -> None:
        entry = self.by_name.pop(name, None)
        if entry is not None:
            self.by_slot[entry[0]] = None
            del self._recent[name]
            if name == self.newest:
                self.newest = None
            heapq.heappush(self._free, entry[0])
            self.epoch += 1

    def touch(self, name: str) -> None:
        if name in self._recent:
            self._recent.move_to_end(name)
            self.newest = name
