"""Horovod's elastic state objects (``horovod.common.elastic``): what a training
function commits, restores after a failure, and synchronizes from rank 0 after a reset."""

from __future__ import annotations

import enum
import queue
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


class HostUpdateResult(enum.IntFlag):
    no_update = 0
    removed = 1
    added = 2
    mixed = 3


class HostsUpdatedInterrupt(RuntimeError):
    """Hosts were added or removed: the job re-forms without restoring the last commit.
    ``skip_sync``: only hosts were removed (every member keeps its state)."""

    def __init__(self, skip_sync: bool):
        super().__init__()
        self.skip_sync = skip_sync


def _default_bcast_object(obj: Any, root_rank: int = 0, name: str | None = None) -> Any:
    from gcurun.runtime import broadcast_object

    return broadcast_object(obj, root_rank, name)


def _default_rank() -> int:
    from gcurun.runtime import rank

    return rank()


class State:
    """The base of elastic state: reset callbacks and host-update checks.

    ``save``/``restore``/``sync`` are for subclasses. ``commit()`` saves and then checks
    for host updates, which is a collective: every rank must call it at the same point.
    """

    def __init__(self, bcast_object: Callable[..., Any] | None = None,
                 get_rank: Callable[[], int] | None = None):
        self._bcast_object = bcast_object or _default_bcast_object
        self._rank = get_rank or _default_rank
        self._host_messages: queue.Queue[tuple[int, int]] = queue.Queue()
        self._last_updated_timestamp = 0
        self._reset_callbacks: list[Callable[[], None]] = []

    def register_reset_callbacks(self, callbacks: Sequence[Callable[[], None]]) -> None:
        """Functions called, in order and without arguments, after each reset (the new
        ``size()`` is in place) and before the state is synchronized."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        self._host_messages = queue.Queue()
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp: int, update_res: int) -> None:
        """From the membership thread: the hosts changed (``timestamp`` is the driver's
        strictly increasing notification number)."""
        self._host_messages.put((timestamp, update_res))

    def commit(self) -> None:
        """Save the state (in host memory), then check for host updates: raises
        HostsUpdatedInterrupt on every rank when hosts changed."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raise HostsUpdatedInterrupt, on every rank alike, when the hosts changed since
        the last check. A collective: each rank's last acted-on notification number,
        its newest one and the bits of the updates in between are gathered; the highest
        acted-on number is the job's (a worker that joined later has seen fewer), and
        the bits of the ranks that have it are OR-ed."""
        prev, last, bits = self._last_updated_timestamp, self._last_updated_timestamp, 0
        while not self._host_messages.empty():
            timestamp, update = self._host_messages.get()
            if timestamp > prev:
                last = max(last, timestamp)
                bits |= int(update)
        from gcurun.runtime import allgather, is_initialized, size

        if is_initialized() and size() > 1:
            rows = allgather(np.array([[prev, last, bits]], np.int64),
                             name="gcurun.elastic.check_host_updates")
            prev, last = int(rows[:, 0].max()), int(rows[:, 1].max())
            bits = 0
            for row in rows:
                if int(row[0]) == prev:
                    bits |= int(row[2])
        self._last_updated_timestamp = max(prev, last)
        if last > prev:
            raise HostsUpdatedInterrupt(bits == HostUpdateResult.removed)

    def save(self) -> None:
        raise NotImplementedError()

    def restore(self) -> None:
        raise NotImplementedError()

    def sync(self) -> None:
        raise NotImplementedError()

    def reset(self) -> None:
        """A hook for subclasses, called on each reset before the callbacks."""


class ObjectState(State):
    """Named Python values as attributes (``ObjectState(epoch=0, batch=0)``).

    ``save`` keeps a shallow snapshot (mutable values are shared, as in Horovod);
    ``sync`` gives every rank rank 0's saved values."""

    def __init__(self, bcast_object: Callable[..., Any] | None = None,
                 get_rank: Callable[[], int] | None = None, **kwargs: Any):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self) -> None:
        new_state = {}
        for attr in self._saved_state:
            new_state[attr] = getattr(self, attr)
        self._saved_state = new_state

    def restore(self) -> None:
        self._set_attrs()

    def sync(self) -> None:
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self) -> None:
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)
