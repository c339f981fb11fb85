"""Process sets of ``gcurun.runtime.torch``: the runtime's own (Horovod's names), whose
ops run on each set's engine, and :func:`target`, where a set's ops go."""

from __future__ import annotations

from gcurun.runtime import ProcessSet, add_process_set, global_process_set, remove_process_set
from gcurun.runtime.torch.targets import EngineTarget

__all__ = ["ProcessSet", "add_process_set", "global_process_set", "remove_process_set",
           "target"]

JOB = EngineTarget(global_process_set)


def target(process_set: ProcessSet | None) -> EngineTarget:
    """Where the ops of ``process_set`` run (None: the job). Raises ValueError for a set
    that is not registered or of which this rank is not a member."""
    if process_set is None or process_set is global_process_set:
        return JOB
    from gcurun.runtime.frontend.process_sets import collectives_of

    collectives_of(process_set, "process set")          # refuses sets this rank may not use
    return EngineTarget(process_set)
