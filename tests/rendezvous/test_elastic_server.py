"""The elastic rendezvous server alone: membership clients and registering ranks in this
process; the test plays the driver (publish, notify, abort, finish)."""

from __future__ import annotations

import queue
import socket
import threading
import time
from typing import Any

import pytest

from gcurun.rendezvous import wire
from gcurun.rendezvous.client import RendezvousClient
from gcurun.rendezvous.elastic import (
    ElasticRendezvousServer,
    MembershipClient,
    RendezvousLost,
    WorkerRemoved,
)
from gcurun.rendezvous.server import LABEL, new_secret
from gcurun.runtime.api import PeerFailureError
from tests.helpers import wait_for

SECRET = new_secret()
WAIT = 10.0


class Driver:
    """The server's events, in order."""

    def __init__(self) -> None:
        self.events: queue.Queue[tuple] = queue.Queue()

    def next(self, kind: str) -> tuple:
        """The next event of ``kind`` (others before it are skipped)."""
        while True:
            event = self.events.get(timeout=WAIT)
            if event[0] == kind:
                return event


@pytest.fixture
def served():
    driver = Driver()
    server = ElasticRendezvousServer("127.0.0.1", 0, secret=SECRET,
                                     on_event=driver.events.put, liveness=3.0)
    server.start()
    members: list[MembershipClient] = []

    def member(worker: int, updates: list | None = None,
               lost: list | None = None) -> MembershipClient:
        seen = updates if updates is not None else []
        m = MembershipClient(server.address, SECRET, worker=worker, host=f"h{worker}",
                             timeout=WAIT, liveness=3.0,
                             on_hosts_updated=lambda seq, bits: seen.append((seq, bits)),
                             on_lost=(lost if lost is not None else []).append)
        m.connect()
        members.append(m)
        assert driver.next("hello") == ("hello", worker)
        return m

    yield server, driver, member
    for m in members:
        m.close()
    server.close()


def assignment(worker: int, rank: int, size: int) -> dict[str, Any]:
    return {"worker": worker, "rank": rank, "size": size, "local_rank": 0, "local_size": 1,
            "cross_rank": rank, "cross_size": size, "sync": True}


def join_in_thread(m: MembershipClient, after: int) -> queue.Queue:
    out: queue.Queue = queue.Queue()

    def run() -> None:
        try:
            out.put(m.join(after))
        except Exception as exc:  # noqa: BLE001 - the test reads what happened
            out.put(exc)

    threading.Thread(target=run, daemon=True).start()
    return out


def raw_member(server, worker: int) -> socket.socket:
    """A worker's membership connection by hand: hello and join, then whatever the test
    does with the socket (closing it without a goodbye: the process died)."""
    sock = socket.create_connection(server.address, timeout=WAIT)
    deadline = time.monotonic() + WAIT
    server_nonce, client_nonce = wire.client_handshake(sock, SECRET, wire.RENDEZVOUS_MAGIC,
                                                       LABEL, deadline)
    wire.recv_exact(sock, wire.MAC_BYTES, deadline)
    sock.sendall(wire.encode_frame({"op": "hello", "worker": worker, "host": f"h{worker}"}))
    sock.sendall(wire.encode_frame({"op": "join", "after": 0}))
    return sock


def register(server, generation: int, rank: int, size: int,
             aborts: list[str] | None = None) -> tuple[RendezvousClient, queue.Queue]:
    c = RendezvousClient(server.address, SECRET, WAIT, (aborts if aborts is not None
                                                        else []).append)
    c.connect()
    out: queue.Queue = queue.Queue()

    def run() -> None:
        try:
            out.put(c.register(generation, rank, size, {"rank": rank, "host": f"h{rank}"}))
        except Exception as exc:  # noqa: BLE001
            out.put(exc)

    threading.Thread(target=run, daemon=True).start()
    return c, out


def test_a_join_waits_for_the_driver_and_gets_its_assignment(served):
    server, driver, member = served
    a, b = member(0), member(1)
    answers = [join_in_thread(a, 0), join_in_thread(b, 0)]
    assert {driver.next("joined"), driver.next("joined")} == {("joined", 0, 0),
                                                              ("joined", 1, 0)}
    assert all(q.empty() for q in answers)      # held until the driver publishes
    server.publish(1, [assignment(0, 1, 2), assignment(1, 0, 2)])
    got = [q.get(timeout=WAIT) for q in answers]
    assert [(g["op"], g["generation"], g["rank"], g["size"], g["sync"]) for g in got] == [
        ("assign", 1, 1, 2, True), ("assign", 1, 0, 2, True)]
    assert "worker" not in got[0]


def test_the_ranks_of_a_generation_register_and_a_stale_one_is_fenced_out(served):
    server, driver, member = served
    a = member(0)
    q = join_in_thread(a, 0)
    server.publish(1, [assignment(0, 0, 1)])
    assert q.get(timeout=WAIT)["generation"] == 1
    c, got = register(server, 1, 0, 1)
    assert got.get(timeout=WAIT) == [{"rank": 0, "host": "h0"}]
    assert driver.next("formed") == ("formed", 1)
    c.close()
    late, refused = register(server, 0, 0, 1)
    exc = refused.get(timeout=WAIT)
    assert isinstance(exc, PeerFailureError)
    assert "generation 0 is over (the job runs generation 1); this worker was fenced out" \
        in str(exc)
    wrong, refused = register(server, 1, 3, 5)
    assert "rank 3 of 5 is not a rank of generation 1 (1 ranks)" in str(
        refused.get(timeout=WAIT))
    late.close()
    wrong.close()


def test_a_member_lost_without_goodbye_aborts_its_generation_for_the_others(served):
    server, driver, member = served
    a = member(0)
    qa = join_in_thread(a, 0)
    b = raw_member(server, 1)
    assert driver.next("hello") == ("hello", 1)
    server.publish(1, [assignment(0, 0, 2), assignment(1, 1, 2)])
    qa.get(timeout=WAIT)
    aborts: list[str] = []
    c0, g0 = register(server, 1, 0, 2, aborts)
    c1, g1 = register(server, 1, 1, 2)
    g0.get(timeout=WAIT), g1.get(timeout=WAIT)
    b.close()                                   # the process died: no goodbye
    assert driver.next("lost") == ("lost", 1)
    wait_for("the abort to reach rank 0", lambda: bool(aborts), WAIT)
    assert aborts == ["the job was aborted: worker 1 (host h1) lost its connection to the "
                      "rendezvous without shutting down; the process probably died"]
    c0.close()
    c1.close()


def test_a_member_rejoining_ends_the_generation_and_notify_reaches_members(served):
    server, driver, member = served
    updates: list = []
    a, b = member(0, updates), member(1)
    qa, qb = join_in_thread(a, 0), join_in_thread(b, 0)
    driver.next("joined"), driver.next("joined")
    server.publish(1, [assignment(0, 0, 2), assignment(1, 1, 2)])
    qa.get(timeout=WAIT), qb.get(timeout=WAIT)
    server.notify(7, 1)
    aborts: list[str] = []
    c0, g0 = register(server, 1, 0, 2, aborts)
    c1, g1 = register(server, 1, 1, 2)
    g0.get(timeout=WAIT), g1.get(timeout=WAIT)
    again = join_in_thread(b, 1)                # worker 1 leaves generation 1 to re-form
    assert driver.next("joined") == ("joined", 1, 1)
    wait_for("the abort to reach rank 0", lambda: bool(aborts), WAIT)
    assert aborts == ["the job was aborted: worker 1 (host h1) left generation 1 to "
                      "re-form"]
    # The notification reaches worker 0 on its own connection, in its own time.
    wait_for("the notification to reach worker 0", lambda: bool(updates), WAIT)
    assert updates == [(7, 1)]
    server.publish(2, [assignment(1, 0, 1)], removed=[0])
    assert again.get(timeout=WAIT)["generation"] == 2
    with pytest.raises(WorkerRemoved, match="its slot is no longer part of the job"):
        a.join(1)
    c0.close()
    c1.close()


def test_finish_releases_every_waiting_worker(served):
    server, _, member = served
    a = member(0)
    q = join_in_thread(a, 0)
    server.finish("the job finished")
    exc = q.get(timeout=WAIT)
    assert isinstance(exc, WorkerRemoved) and "the job finished" in str(exc)


def test_a_client_without_the_secret_is_refused_and_the_server_goes_on(served):
    server, _, member = served
    sock = socket.create_connection(server.address, timeout=WAIT)
    deadline = time.monotonic() + WAIT
    wire.client_handshake(sock, b"x" * 16, wire.RENDEZVOUS_MAGIC, LABEL, deadline)
    assert wire.recv_exact(sock, wire.MAC_BYTES, deadline) == wire.REFUSED   # and no more
    with pytest.raises(wire.WireClosed):
        wire.recv_exact(sock, 1, deadline)
    sock.close()
    lost: list = []
    member(3, lost=lost)                        # a real worker still gets in
    assert lost == []


def test_a_lost_rendezvous_fails_the_waiting_join(served):
    server, _, member = served
    a = member(0)
    q = join_in_thread(a, 0)
    server.close()
    exc = q.get(timeout=WAIT)
    assert isinstance(exc, RendezvousLost)
