"""Process sets of ``gcurun.runtime.torch``: the runtime's own (Horovod's names), whose
ops run on each set's engine."""

from __future__ import annotations

from gcurun.runtime import ProcessSet, add_process_set, global_process_set, remove_process_set
from gcurun.runtime.frontend.process_sets import collectives_of

__all__ = ["ProcessSet", "add_process_set", "global_process_set", "member_set",
           "remove_process_set"]


def member_set(process_set: ProcessSet | None, what: str) -> ProcessSet:
    """``process_set`` (None: the job's). Raises ValueError for a set that is not
    registered or of which this rank is not a member."""
    if process_set is None or process_set is global_process_set:
        return global_process_set
    collectives_of(process_set, what)          # refuses sets this rank may not use
    return process_set
