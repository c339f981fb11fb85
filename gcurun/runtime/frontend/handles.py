"""The one table of handles that every binding's asynchronous ops return (numpy, torch,
TensorFlow): what ``poll`` and ``synchronize`` take.

A handle names the engine's handle of one submitted call (on the job's engine or a
process set's; :func:`gcurun.runtime.frontend.async_ops.submit` submits and registers),
or several such handles that complete as one. It also holds how the
engine's result becomes the caller's (``finish``: a torch tensor, say) and what must stay
alive until the op completes (``keep``: staged host copies of the caller's tensors).
``init`` and ``shutdown`` forget every handle.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any

from gcurun.errors import CollectiveError
from gcurun.runtime.engine.handles import HandleError

Finish = Callable[[Any], Any]


class _Entry:
    __slots__ = ("engine", "engine_handles", "several", "finish", "keep")

    def __init__(self, engine: Any, engine_handles: list[int], several: bool,
                 finish: Finish | None, keep: Any):
        self.engine = engine
        self.engine_handles = engine_handles
        self.several = several
        self.finish = finish
        self.keep = keep


_entries: dict[int, _Entry] = {}
_counter = itertools.count(1)
_lock = threading.Lock()


def register(engine: Any, engine_handle: int, *, finish: Finish | None = None,
             keep: Any = None) -> int:
    """A new handle for ``engine``'s handle: ``finish`` maps the engine's result to the
    caller's; ``keep`` stays referenced until the handle is synchronized."""
    handle = next(_counter)
    entry = _Entry(engine, [engine_handle], False, finish, keep)
    with _lock:
        _entries[handle] = entry
    return handle


def combine(handles: Sequence[int], *, finish: Finish | None = None, keep: Any = None) -> int:
    """One handle for several handles of one engine (each registered without a
    ``finish``), whose result is the list of theirs; the handles given are spent."""
    with _lock:
        parts = [_entries.pop(h) for h in handles]
        engine_handles = [h for part in parts for h in part.engine_handles]
        handle = next(_counter)
        _entries[handle] = _Entry(parts[0].engine if parts else None, engine_handles, True,
                                  finish, keep)
    return handle


def hold(handle: int, keep: Any) -> int:
    """``handle``, which now also keeps ``keep`` alive until it is synchronized."""
    with _lock:
        entry = _entries.get(handle)
        if entry is None:
            raise unknown_handle(handle)
        entry.keep = keep
    return handle


def unknown_handle(handle: Any) -> HandleError:
    """The error for a handle that is not (or no longer) in the table."""
    return HandleError(f"handle {handle!r} is unknown or was synchronized already; "
                       "synchronize each handle exactly once (handles of a job end with "
                       "shutdown() or a new init())")


def known(handle: Any) -> bool:
    """Whether ``handle`` is pending (returned by an async op and not yet synchronized)."""
    return handle in _entries


def poll(handle: int) -> bool:
    """Whether the op of ``handle`` is done (never blocks). Raises HandleError for an
    unknown handle."""
    entry = _entries.get(handle)
    if entry is None:
        raise unknown_handle(handle)
    return all(entry.engine.poll(h) for h in entry.engine_handles)


def synchronize(handle: int) -> Any:
    """Wait for ``handle`` and return its result, or raise its op's error (once every
    engine handle it names has been waited for, so that their names are free again).
    Each handle can be synchronized once, else HandleError."""
    with _lock:
        entry = _entries.pop(handle, None)
    if entry is None:
        raise unknown_handle(handle)
    engine = entry.engine
    if entry.several:
        result: Any = []
        error: CollectiveError | None = None
        for engine_handle in entry.engine_handles:
            try:
                result.append(engine.synchronize(engine_handle))
            except CollectiveError as exc:
                error = error or exc
        if error is not None:
            raise error
    else:
        result = engine.synchronize(entry.engine_handles[0])
    return result if entry.finish is None else entry.finish(result)


def reset() -> None:
    """Forget every handle (``init`` and ``shutdown`` start a new job)."""
    with _lock:
        _entries.clear()
