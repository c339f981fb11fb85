"""Process sets, as the framework-neutral runtime defines them.

The binding has no process sets of its own: ``ProcessSet``, ``add_process_set``,
``remove_process_set`` and ``global_process_set`` are ``gcurun.runtime``'s, and a
collective called with a set passes it to the runtime's call as ``process_set=``.
Until the runtime has process sets, the global set stands for the whole job and any
other set is refused with a message saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gcurun.runtime as runtime

_MISSING = ("process sets need a gcurun runtime that has them (gcurun.runtime."
            "add_process_set); this one runs collectives on the whole job only: drop "
            "process_set=")

try:
    from gcurun.runtime import (  # type: ignore[attr-defined]
        ProcessSet,
        add_process_set,
        global_process_set,
        remove_process_set,
    )
    SUPPORTED = True
except ImportError:
    SUPPORTED = False

    class ProcessSet:  # type: ignore[no-redef]
        """Ranks that run collectives among themselves (needs runtime support)."""

        def __init__(self, ranks_or_comm: Sequence[int] | Any):
            self.ranks = None if hasattr(ranks_or_comm, "Get_group") else \
                sorted(int(r) for r in ranks_or_comm)
            self.process_set_id: int | None = None

        def size(self) -> int | None:
            return None if self.ranks is None else len(self.ranks)

        def rank(self) -> int | None:
            if self.ranks is None or not runtime.is_initialized():
                return None
            me = runtime.rank()
            return self.ranks.index(me) if me in self.ranks else None

        def included(self) -> bool | None:
            if self.ranks is None or not runtime.is_initialized():
                return None
            return runtime.rank() in self.ranks

        def __repr__(self) -> str:
            return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    class _GlobalProcessSet(ProcessSet):
        def __init__(self) -> None:
            self.process_set_id = 0

        @property  # type: ignore[override]
        def ranks(self) -> list[int] | None:
            return list(range(runtime.size())) if runtime.is_initialized() else None

        @ranks.setter
        def ranks(self, value: Any) -> None:
            pass

    global_process_set = _GlobalProcessSet()  # type: ignore[assignment]

    def add_process_set(process_set: Any) -> Any:  # type: ignore[misc]
        raise NotImplementedError(_MISSING)

    def remove_process_set(process_set: Any) -> bool:  # type: ignore[misc]
        raise NotImplementedError(_MISSING)


def set_kwargs(process_set: Any) -> dict[str, Any]:
    """The keyword arguments that route a runtime call to ``process_set``: none for the
    whole job; raises NotImplementedError for another set on a runtime without sets."""
    if process_set is None or process_set is global_process_set:
        return {}
    if not SUPPORTED:
        raise NotImplementedError(_MISSING)
    return {"process_set": process_set}


def set_size(process_set: Any) -> int:
    """How many ranks take part in a collective on ``process_set``."""
    if process_set is None or process_set is global_process_set:
        return runtime.size()
    return len(process_set.ranks or [])


def set_rank(process_set: Any) -> int:
    """This rank's position in ``process_set`` (its rank in the job for the global set)."""
    if process_set is None or process_set is global_process_set:
        return runtime.rank()
    found = process_set.rank()
    if found is None:
        raise ValueError(f"rank {runtime.rank()} is not a member of {process_set}; only "
                         "its ranks call its collectives")
    return int(found)


__all__ = ["ProcessSet", "SUPPORTED", "add_process_set", "global_process_set",
           "remove_process_set", "set_kwargs", "set_rank", "set_size"]
