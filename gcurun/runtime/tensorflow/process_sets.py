"""Process sets, as the framework-neutral runtime defines them.

The binding has no process sets of its own: ``ProcessSet``, ``add_process_set``,
``remove_process_set`` and ``global_process_set`` are ``gcurun.runtime``'s, and a
collective called with a set passes it to the runtime's call as ``process_set=``.
"""

from __future__ import annotations

from typing import Any

import gcurun.runtime as runtime
from gcurun.runtime import (
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)


def set_kwargs(process_set: Any) -> dict[str, Any]:
    """The keyword arguments that route a runtime call to ``process_set``: none for the
    whole job."""
    if process_set is None or process_set is global_process_set:
        return {}
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


__all__ = ["ProcessSet", "add_process_set", "global_process_set",
           "remove_process_set", "set_kwargs", "set_rank", "set_size"]
