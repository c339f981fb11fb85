"""The elastic loop (Horovod's ``run_fn``): run the training function; on a lost peer
restore the last commit, on a host update keep the state; re-form the job in this same
process and run the function again from the top."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

from gcurun.errors import CollectiveError, CollectiveTimeout, PeerFailureError
from gcurun.rendezvous.elastic import WorkerRemoved
from gcurun.runtime.elastic import membership
from gcurun.runtime.elastic.state import HostsUpdatedInterrupt, State

log = logging.getLogger("gcurun.elastic")


def recoverable(exc: BaseException) -> bool:
    """Whether a re-formed job can get past ``exc``: a lost peer, a timeout, or a
    ``HorovodInternalError`` the script raised itself; never a deterministic program
    error (mismatched tensors, bad arguments, a handle misused, an engine bug)."""
    from gcurun.runtime.api import ArgumentError, MismatchError, NotInitializedError
    from gcurun.runtime.engine.decision import ProtocolError
    from gcurun.runtime.engine.handles import HandleError

    if isinstance(exc, (PeerFailureError, CollectiveTimeout)):
        return True
    return isinstance(exc, CollectiveError) and not isinstance(
        exc, (MismatchError, ArgumentError, NotInitializedError, HandleError, ProtocolError))


def elastic_job() -> bool:
    """Whether gcurun's elastic launcher started this process."""
    from gcurun.runtime.settings import read_runtime_env

    return membership.is_elastic(read_runtime_env())


def run_fn(func: Callable[..., Any], reset: Callable[[], None]) -> Callable[..., Any]:
    """``func(state, ...)`` wrapped in the elastic loop; ``reset`` re-initialises the
    runtime (shutdown, then init) and is retried while the next generation fails to
    form. Outside an elastic job the state is synchronized once and ``func`` runs once.
    A worker whose slot was removed leaves with exit status 0."""
    @functools.wraps(func)
    def wrapper(state: State, *args: Any, **kwargs: Any) -> Any:
        if not elastic_job():
            state.sync()
            return func(state, *args, **kwargs)
        membership.register_listener(state)
        skip_sync = False
        try:
            while True:
                try:
                    assignment = membership.last_assignment() or {}
                    if not (skip_sync and not assignment.get("sync", True)):
                        state.sync()
                    return func(state, *args, **kwargs)
                except HostsUpdatedInterrupt as exc:
                    skip_sync = exc.skip_sync
                except Exception as exc:  # noqa: BLE001 - sorted by recoverable()
                    if not recoverable(exc):
                        raise
                    log.warning("gcurun elastic: %s; restoring the last commit", exc)
                    state.restore()
                    skip_sync = False
                _reset_until_formed(reset)
                state.on_reset()
        except WorkerRemoved as exc:
            sys.stderr.write(f"gcurun: elastic: {exc}\n")
            sys.stderr.flush()
            raise SystemExit(0) from None
        finally:
            membership.remove_listener(state)
    return wrapper


def _reset_until_formed(reset: Callable[[], None]) -> None:
    """``reset()`` until a generation forms (a member dying while it forms aborts it;
    the driver counts each try as a reset and ends the job at its limits)."""
    while True:
        try:
            reset()
            return
        except Exception as exc:  # noqa: BLE001 - sorted by recoverable()
            if not recoverable(exc):
                raise
            log.warning("gcurun elastic: generation failed to form (%s); joining again", exc)


def default_reset() -> None:
    from gcurun.runtime import init, shutdown

    shutdown()
    init()


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """``hvd.elastic.run`` for framework-neutral scripts (numpy buffers)."""
    return run_fn(func, default_reset)

