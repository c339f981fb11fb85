"""Names of unnamed ops: a counter per kind (``allreduce.unnamed.3``), the same on every
rank because unnamed calls come in the same order on every rank, as in Horovod.

The names come round every ``AUTO_NAMES`` calls, so that unnamed ops hit the response
cache like named ones (a loop of calls of a few signatures repeats its names with the
same signatures); an op whose name is still pending on its rank waits for it (see
:meth:`gcurun.runtime.engine.cycles.Cycles._admit`).

A rank that has called ``join()`` takes part in the others' unnamed ops without calling
them: :meth:`AutoNames.follow` moves its counter past each such name, so that its next
unnamed call of that kind gets the name the others' next one gets.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterator

# A multiple of every period up to 6, so that a loop of a few unnamed calls of different
# shapes finds each name cached with the shape it had the last time round.
AUTO_NAMES = 60
_AUTO = re.compile(r"(\w+)\.unnamed\.(\d+)(?:\.|$)")


class AutoNames:
    """The counters of one engine's unnamed ops, one per kind; any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, tuple[Iterator[int], list[str]]] = {}

    def next(self, label: str) -> str:
        """The next name for an unnamed op of kind ``label``."""
        found = self._counters.get(label)
        if found is None:
            with self._lock:
                found = self._counters.setdefault(label, _fresh(label, 0))
        counter, names = found
        return names[next(counter) % AUTO_NAMES]    # next(): atomic, calls from any thread

    def follow(self, name: str) -> None:
        """``name`` ran (or failed) on the other ranks while this rank had joined: the
        next unnamed op of its kind here is the one after it. Other names are ignored."""
        found = _AUTO.match(name)
        if found is None:
            return
        label, index = found[1], int(found[2])
        with self._lock:
            current = self._counters.get(label)
            position = next(current[0]) if current is not None else 0
            ahead = (index + 1 - position) % AUTO_NAMES
            self._counters[label] = _fresh(label, position + ahead)


def _fresh(label: str, start: int) -> tuple[Iterator[int], list[str]]:
    return itertools.count(start), [f"{label}.unnamed.{n}" for n in range(AUTO_NAMES)]
