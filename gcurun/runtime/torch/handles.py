"""Handles of asynchronous ops on torch tensors: what ``poll`` and ``synchronize`` take.

Each handle holds the runtime's work (a handle of the runtime's background engine, or
an op that already ran), a function that turns the runtime's numpy result into the torch
result, and references that keep the caller's tensors alive until the op completes.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any, Protocol

from gcurun.errors import CollectiveError
from gcurun.runtime.torch.errors import internal_error


class Work(Protocol):
    """One op submitted to the runtime."""

    def done(self) -> bool:
        """Whether ``wait`` would return at once."""

    def wait(self) -> Any:
        """The op's numpy result; raises the op's CollectiveError."""


class Finished:
    """An op that already ran (synchronously): its result, or the error it raised."""

    __slots__ = ("result", "error")

    def __init__(self, result: Any = None, error: BaseException | None = None):
        self.result = result
        self.error = error

    def done(self) -> bool:
        return True

    def wait(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


def run_now(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Finished:
    """Run a synchronous collective; its CollectiveError is kept for ``wait`` to raise,
    as the error of an asynchronous op would be."""
    try:
        return Finished(fn(*args, **kwargs))
    except CollectiveError as exc:
        return Finished(error=exc)


class EngineWork:
    """An op of the runtime's background engine."""

    __slots__ = ("runtime", "handle")

    def __init__(self, runtime: Any, handle: int):
        self.runtime = runtime
        self.handle = handle

    def done(self) -> bool:
        return bool(self.runtime.poll(self.handle))

    def wait(self) -> Any:
        return self.runtime.synchronize(self.handle)


class Combined:
    """Several ops that complete as one: ``wait`` returns their results as a list."""

    __slots__ = ("works",)

    def __init__(self, works: list[Work]):
        self.works = works

    def done(self) -> bool:
        return all(work.done() for work in self.works)

    def wait(self) -> list[Any]:
        """Every op's result; the first error once every op has been waited for (each
        handle of the runtime is synchronized, so that its name is free again)."""
        results, error = [], None
        for work in self.works:
            try:
                results.append(work.wait())
            except CollectiveError as exc:
                error = error or exc
        if error is not None:
            raise error
        return results


class _Entry:
    __slots__ = ("work", "finish", "keep")

    def __init__(self, work: Work, finish: Callable[[Any], Any], keep: Any):
        self.work = work
        self.finish = finish
        self.keep = keep


class CallableHandle(int):
    """A handle that is also a function: ``handle()`` is ``synchronize(handle)``. Horovod's
    ``sparse_allreduce_async`` returns a function to call; this works both ways."""

    __slots__ = ()

    def __call__(self) -> Any:
        return synchronize(self)


_entries: dict[int, _Entry] = {}
_counter = itertools.count(1)
_lock = threading.Lock()


def register(work: Work, finish: Callable[[Any], Any], keep: Any = None) -> int:
    """A new handle for ``work``; ``finish`` maps its numpy result to the torch result."""
    handle = next(_counter)
    with _lock:
        _entries[handle] = _Entry(work, finish, keep)
    return handle


def poll(handle: int) -> bool:
    """Whether the op of ``handle`` has completed (``synchronize`` will not block)."""
    entry = _entries.get(handle)
    if entry is None:
        raise ValueError(f"handle {handle!r} is unknown: it was never returned by an "
                         "async op, was already synchronized, or init() ran since")
    return entry.work.done()


def synchronize(handle: int) -> Any:
    """Wait for the op of ``handle`` and return its result; the handle is then spent.

    Raises the op's error as :class:`HorovodInternalError` (also an instance of the
    runtime's class for the cause)."""
    with _lock:
        entry = _entries.pop(handle, None)
    if entry is None:
        raise ValueError(f"handle {handle!r} is unknown: it was never returned by an "
                         "async op, was already synchronized, or init() ran since")
    try:
        result = entry.work.wait()
    except CollectiveError as exc:
        raise internal_error(exc) from exc
    return entry.finish(result)


def reset() -> None:
    """Forget every handle (``init`` and ``shutdown`` start a new job)."""
    with _lock:
        _entries.clear()
