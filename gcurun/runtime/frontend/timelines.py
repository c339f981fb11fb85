"""Runtime control of the timeline (Horovod's ``start_timeline`` and ``stop_timeline``).

The timeline is the engine's Chrome trace (:mod:`gcurun.runtime.engine.timeline`). These
calls start, switch or stop it while the job runs, on the job's engine and on every
process set's engine (a set writes ``FILE.set<ID>.json`` beside the job's file, as with
``GCURUN_TIMELINE_FILENAME``); sets added later follow the same setting. They are local calls: the
ranks that write a file (rank 0, or every rank for a path containing ``{rank}``) are the
ones whose call counts, and every rank may call them.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from gcurun.runtime.frontend import state as job
from gcurun.runtime.frontend.process_sets import set_timeline_path


def start_timeline(file_path: str | os.PathLike[str], mark_cycles: bool = False) -> None:
    """Write the timeline to ``file_path`` from the next engine cycle on, marking every
    cycle when ``mark_cycles``. A timeline being written to another file is closed,
    complete, first; the same file again goes on. Unlike Horovod, no
    ``HOROVOD_TIMELINE=DYNAMIC`` is needed first.

    Raises NotInitializedError before init(), ValueError for an empty path, UsageError
    for a path that cannot be written.
    """
    path = os.fspath(file_path)
    if not isinstance(path, str) or not path:
        raise ValueError(f"start_timeline(file_path={file_path!r}): give the path of the "
                         "JSON file to write, such as 'timeline.json'")
    _apply(path, bool(mark_cycles), "start_timeline()")


def stop_timeline() -> None:
    """Stop writing the timeline and close its file (a complete JSON trace). Does nothing
    when no timeline is being written. Raises NotInitializedError before init()."""
    _apply(None, False, "stop_timeline()")


def _apply(template: str | None, mark_cycles: bool, what: str) -> None:
    current = job.state(what)
    current.env = dataclasses.replace(current.env, timeline=template,
                                      timeline_mark_cycles=mark_cycles)
    engines: list[tuple[Any, str | None]] = [(current.engine, template)]
    for set_id, process_set in list(current.sets.items()):
        if process_set.engine is not None:
            engines.append((process_set.engine, set_timeline_path(template, set_id)))
    for engine, path in engines:
        engine.set_timeline(path, mark_cycles)
