"""``poll`` and ``synchronize`` of ``gcurun.runtime.torch``: the runtime's one table of
handles (:mod:`gcurun.runtime.frontend.handles`), whose entries turn the runtime's numpy
results into torch tensors, with Horovod's error class."""

from __future__ import annotations

from typing import Any

from gcurun.errors import CollectiveError
from gcurun.runtime.frontend import handles
from gcurun.runtime.torch.errors import internal_error


class CallableHandle(int):
    """A handle that is also a function: ``handle()`` is ``synchronize(handle)``. Horovod's
    ``sparse_allreduce_async`` returns a function to call; this works both ways."""

    __slots__ = ()

    def __call__(self) -> Any:
        return synchronize(self)


def poll(handle: int) -> bool:
    """Whether the op of ``handle`` has completed (``synchronize`` will not block).
    Raises HandleError (a ValueError) for an unknown handle."""
    return handles.poll(handle)


def synchronize(handle: int) -> Any:
    """Wait for the op of ``handle`` and return its result; the handle is then spent.

    Raises HandleError (a ValueError) for an unknown handle, and the op's error as
    :class:`HorovodInternalError` (also an instance of the runtime's class for the
    cause)."""
    if not handles.known(handle):       # not an error of an op: no HorovodInternalError
        raise handles.unknown_handle(handle)
    try:
        return handles.synchronize(handle)
    except CollectiveError as exc:
        raise internal_error(exc) from exc
