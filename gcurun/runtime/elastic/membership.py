"""A worker's membership of an elastic job: its one connection to the launcher's
rendezvous (opened by the first ``init()``, kept for the process's life), the generation
it last joined, and the state objects listening for host updates."""

from __future__ import annotations

import atexit
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gcurun.rendezvous.elastic import MembershipClient
from gcurun.runtime.settings import RuntimeEnv

if TYPE_CHECKING:
    from gcurun.runtime.frontend.layout import RankLayout
    from gcurun.runtime.transport.opening import Opened

_client: MembershipClient | None = None
_last_generation = 0
_assignment: dict[str, Any] | None = None
_listeners: weakref.WeakSet[Any] = weakref.WeakSet()
_on_lost: Callable[[str], None] | None = None    # the runtime's: wake blocked collectives
_lock = threading.Lock()


def is_elastic(env: RuntimeEnv) -> bool:
    return env.elastic_worker is not None


def join_generation(env: RuntimeEnv, host: str) -> dict[str, Any]:
    """Wait for this worker's place in the next generation (the driver decides).

    Raises WorkerRemoved or RendezvousLost (:mod:`gcurun.rendezvous.elastic`)."""
    global _client, _last_generation, _assignment
    assert env.elastic_worker is not None and env.rendezvous is not None
    assert env.secret is not None
    if _client is None:
        client = MembershipClient(env.rendezvous, env.secret, worker=env.elastic_worker,
                                  host=host, timeout=env.timeout_seconds,
                                  liveness=env.liveness_seconds,
                                  on_hosts_updated=_hosts_updated, on_lost=_lost)
        client.connect()
        _client = client
        atexit.register(client.close)
    assignment = _client.join(_last_generation)
    _last_generation = int(assignment["generation"])
    _assignment = assignment
    return assignment


def last_assignment() -> dict[str, Any] | None:
    """The assignment of the generation this worker last joined (None before)."""
    return _assignment


def open_elastic(env: RuntimeEnv, host: str, *, on_lost: Callable[[str], None]
                 ) -> tuple[Opened, RankLayout]:
    """This worker's next generation: join, then open the tcp transport among its
    members (every member calls it); the transport and this rank's place in it.
    ``on_lost(reason)`` runs when the launcher is gone for this worker."""
    global _on_lost
    _on_lost = on_lost
    from gcurun.runtime.frontend.layout import RankLayout, derive_rank_layout
    from gcurun.runtime.transport.opening import open_transport

    assert env.rendezvous is not None and env.secret is not None
    a = join_generation(env, host)
    rank, size = int(a["rank"]), int(a["size"])
    opened = open_transport("tcp", env, range(size), rank, hostname=host,
                            generation=int(a["generation"]),
                            rendezvous=(env.rendezvous, env.secret))
    assert opened.transport is not None
    derived = derive_rank_layout([str(p.get("host")) for p in opened.peers], rank)
    layout = RankLayout(rank, size, int(a["local_rank"]), int(a["local_size"]),
                        int(a["cross_rank"]), int(a["cross_size"]), derived.homogeneous)
    return opened, layout


def register_listener(state: Any) -> None:
    with _lock:
        _listeners.add(state)


def remove_listener(state: Any) -> None:
    with _lock:
        _listeners.discard(state)


def _hosts_updated(seq: int, bits: int) -> None:
    with _lock:
        listeners = list(_listeners)
    for state in listeners:
        state.on_hosts_updated(seq, bits)


def _lost(reason: str) -> None:
    """The launcher is gone for this worker: wake every blocked collective."""
    if _on_lost is not None:
        _on_lost(reason)
