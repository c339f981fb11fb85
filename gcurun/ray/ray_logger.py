"""Values a rank sends to the driver's callbacks (Horovod's ``horovod.ray.ray_logger``):
``ray_logger.log({...})`` inside a function an executor runs puts the value on the job's
queue; every callback given to ``run``/``execute`` is called with it on the driver."""

from __future__ import annotations

import warnings
from typing import Any

_queue: Any = None
_warned = False


def configure(queue: Any) -> None:
    """Send this process's values to ``queue`` (a ``ray.util.queue.Queue``)."""
    global _queue
    _queue = queue


def log(info: Any) -> None:
    """Send ``info`` (anything picklable) to the driver's callbacks; outside a job run
    with callbacks, warn once and drop it."""
    global _warned
    if _queue is not None:
        _queue.put(info)
    elif not _warned:
        _warned = True
        warnings.warn("ray_logger.log() called outside a job that has callbacks; the value "
                      "is dropped", stacklevel=2)
