"""The rendezvous server the launcher runs, driven by clients in the test process."""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable

import pytest

from gcurun.errors import CollectiveTimeout, GcurunError, LaunchError
from gcurun.rendezvous import wire
from gcurun.rendezvous.client import RendezvousClient
from gcurun.rendezvous.server import LABEL, RendezvousServer, new_secret
from gcurun.runtime.api import PeerFailureError
from tests.helpers import wait_for

SECRET = new_secret()


@pytest.fixture
def server_factory():
    servers: list[RendezvousServer] = []

    def make(size: int, **kw) -> RendezvousServer:
        server = RendezvousServer("127.0.0.1", 0, secret=kw.pop("secret", SECRET), size=size,
                                  **kw)
        server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def client(server: RendezvousServer, aborts: list[str] | None = None,
           secret: bytes = SECRET) -> RendezvousClient:
    sink = aborts if aborts is not None else []
    return RendezvousClient(server.address, secret, 10.0, sink.append)


def register_all(server: RendezvousServer, size: int, generation: int = 1,
                 aborts: list[str] | None = None) -> tuple[list[RendezvousClient], list]:
    """``size`` clients register concurrently; returns them and what each received."""
    clients = [client(server, aborts) for _ in range(size)]
    results: list = [None] * size

    def one(rank: int) -> None:
        clients[rank].connect()
        results[rank] = clients[rank].register(generation, rank, size, {"rank": rank,
                                                                       "host": f"h{rank}"})

    threads = [threading.Thread(target=one, args=(r,)) for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    return clients, results


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "refused the connection" in r.getMessage()]


def logged(caplog: pytest.LogCaptureFixture, text: str) -> Callable[[], bool]:
    return lambda: any(text in message for message in refusals(caplog))


def test_every_rank_learns_every_address(server_factory) -> None:
    server = server_factory(3)
    clients, results = register_all(server, 3)
    expected = [{"rank": r, "host": f"h{r}"} for r in range(3)]
    assert results == [expected] * 3
    assert server.registered(1) == dict(enumerate(expected))
    for c in clients:
        c.close()


def test_a_wrong_secret_is_refused_logged_and_harmless(server_factory, caplog) -> None:
    caplog.set_level(logging.WARNING, "gcurun.rendezvous")
    server = server_factory(1)
    intruder = client(server, secret=b"a secret of another job")
    with pytest.raises(PeerFailureError) as refused:
        intruder.connect()
    assert str(refused.value) == (
        f"init: the rendezvous at 127.0.0.1:{server.address[1]} refused this rank's proof "
        "of the job's secret: GCURUN_SECRET is not the one the launcher set")
    wait_for("the refusal in the log", logged(caplog, "failed authentication"))
    assert refusals(caplog)[0].startswith(f"rendezvous 127.0.0.1:{server.address[1]}: "
                                          "refused the connection from 127.0.0.1:")
    clients, results = register_all(server, 1)
    assert results == [[{"rank": 0, "host": "h0"}]]
    clients[0].close()


def test_garbage_bytes_are_refused_logged_and_harmless(server_factory, caplog) -> None:
    caplog.set_level(logging.WARNING, "gcurun.rendezvous")
    server = server_factory(2)
    with socket.create_connection(server.address, timeout=5) as junk:
        junk.sendall(os.urandom(300))
        wait_for("the refusal in the log", logged(caplog, "failed authentication"))
    clients, results = register_all(server, 2)
    assert all(len(r) == 2 for r in results)
    for c in clients:
        c.close()


def test_a_silent_connection_is_dropped_after_the_handshake_timeout(server_factory,
                                                                     caplog) -> None:
    caplog.set_level(logging.WARNING, "gcurun.rendezvous")
    server = server_factory(1, handshake_timeout=0.3)
    with socket.create_connection(server.address, timeout=5) as silent:
        wait_for("the refusal in the log", logged(caplog, "no valid handshake within 0.3 s"))
        hello = silent.recv(100)
        assert hello.startswith(wire.RENDEZVOUS_MAGIC)
        assert silent.recv(100) == b""        # then the server hung up


def test_an_oversized_frame_is_refused(server_factory, caplog) -> None:
    caplog.set_level(logging.WARNING, "gcurun.rendezvous")
    server = server_factory(1)
    with socket.create_connection(server.address, timeout=5) as sock:
        deadline = time.monotonic() + 5
        nonces = wire.client_handshake(sock, SECRET, wire.RENDEZVOUS_MAGIC, LABEL, deadline)
        proof = wire.recv_exact(sock, wire.MAC_BYTES, deadline)
        assert wire.check_proof(SECRET, LABEL, *nonces, proof) is not None
        sock.sendall(wire.FRAME.pack(wire.FRAME_LIMIT + 1))
        wait_for("the refusal in the log", logged(caplog, "sent a frame of"))


def test_a_rank_that_vanishes_aborts_its_generation(server_factory) -> None:
    server_aborts: list[str] = []
    aborts: list[str] = []
    server = server_factory(2, on_abort=server_aborts.append)
    survivor = client(server, aborts)
    survivor.connect()
    registered = threading.Thread(target=survivor.register, args=(1, 0, 2, {"host": "a"}))
    registered.start()
    with socket.create_connection(server.address, timeout=5) as doomed:
        deadline = time.monotonic() + 5
        nonces = wire.client_handshake(doomed, SECRET, wire.RENDEZVOUS_MAGIC, LABEL, deadline)
        wire.recv_exact(doomed, wire.MAC_BYTES, deadline)
        doomed.sendall(wire.encode_frame({"op": "register", "generation": 1, "rank": 1,
                                          "size": 2, "info": {"host": "b"}}))
        wire.recv_frame(doomed, deadline)     # the peers: everybody registered
        del nonces
    registered.join(10)
    wait_for("the abort", lambda: bool(aborts))
    assert "rank 1 (host b) lost its connection to the rendezvous" in aborts[0]
    assert server_aborts and "rank 1 (host b)" in server_aborts[0]
    survivor.close()


def test_a_rank_that_says_goodbye_aborts_nothing(server_factory) -> None:
    aborts: list[str] = []
    server = server_factory(2)
    clients, _ = register_all(server, 2, aborts=aborts)
    clients[1].close()
    clients[0].close()
    assert aborts == []


def test_generations_follow_each_other(server_factory) -> None:
    server = server_factory(2)
    for generation in (1, 2, 3):
        clients, results = register_all(server, 2, generation=generation)
        assert all(len(r) == 2 for r in results)
        assert server.registered() == server.registered(generation)
        for c in clients:
            c.close()


def test_a_rank_registered_twice_is_told_why(server_factory) -> None:
    server = server_factory(2)
    first, second = client(server), client(server)
    first.connect()
    second.connect()
    outcome: list[BaseException] = []

    def register_first() -> None:
        try:
            first.register(1, 0, 2, {})
        except PeerFailureError as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=register_first)
    waiting.start()
    wait_for("the first registration", lambda: 0 in server.registered(1))
    with pytest.raises(PeerFailureError, match="rank 0 registered twice for generation 1"):
        second.register(1, 0, 2, {})
    with pytest.raises(PeerFailureError, match="says the job has 3 ranks but the launcher "
                                               "started 2"):
        third = client(server)
        third.connect()
        third.register(1, 1, 3, {})
    first.close()
    waiting.join(5)
    assert "closed its connection while registering" in str(outcome[0])


def test_the_launcher_can_abort_every_rank(server_factory) -> None:
    aborts: list[str] = []
    server = server_factory(2)
    clients, _ = register_all(server, 2, aborts=aborts)
    server.abort("the launcher is stopping the job")
    wait_for("both aborts", lambda: len(aborts) == 2)
    assert all("the launcher is stopping the job" in a for a in aborts)
    for c in clients:
        c.close()


def test_a_taken_port_names_the_address() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = RendezvousServer("127.0.0.1", port, secret=SECRET, size=1)
        with pytest.raises(LaunchError, match=f"cannot listen on 127.0.0.1:{port}: "
                                              "Address already in use"):
            server.start()
        server.close()


def test_close_is_idempotent_and_address_needs_start() -> None:
    server = RendezvousServer("127.0.0.1", secret=SECRET, size=1)
    with pytest.raises(RuntimeError, match="call start"):
        _ = server.address
    server.start()
    assert server.address[1] > 0
    server.close()
    server.close()


def serve_once(behave: Callable[[socket.socket], None]) -> tuple[tuple[str, int],
                                                                  Callable[[], None]]:
    """A listener on 127.0.0.1 that does ``behave`` with every connection it accepts;
    returns its address and what stops it."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()
    held: list[socket.socket] = []

    def loop() -> None:
        while not stop.is_set():
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(sock)
            behave(sock)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()

    def close() -> None:
        stop.set()
        thread.join(5)
        listener.close()
        for sock in held:
            sock.close()

    return listener.getsockname(), close


def failure_of(address: tuple[str, int]) -> tuple[type, str]:
    rank = RendezvousClient(address, SECRET, 1.0, lambda _: None)
    with pytest.raises(GcurunError) as failed:
        rank.connect()
    return type(failed.value), str(failed.value)


def test_a_rank_that_cannot_reach_the_rendezvous_says_so():
    free = socket.create_server(("127.0.0.1", 0))
    address = free.getsockname()
    free.close()   # nothing listens there now
    assert failure_of(address) == (CollectiveTimeout, (
        f"init: cannot reach the rendezvous at 127.0.0.1:{address[1]} within 1 s (Connection "
        "refused); is the launcher running and GCURUN_RENDEZVOUS an address this host can "
        "reach?"))


def test_a_rank_whose_connection_is_dropped_before_its_handshake_says_so():
    address, close = serve_once(lambda sock: sock.close())
    try:
        kind, message = failure_of(address)
    finally:
        close()
    assert kind is CollectiveTimeout
    shown = f"127.0.0.1:{address[1]}"
    assert re.fullmatch(
        f"init: the rendezvous at {shown} closed this rank's connection before its handshake "
        r"ended, \d+ times in 1 s \(last: .+\); it is crowded by connections that do not "
        "authenticate, or the launcher is stopping", message), message


def test_a_rendezvous_that_never_greets_is_a_timeout_and_says_so():
    address, close = serve_once(lambda sock: None)
    try:
        kind, message = failure_of(address)
    finally:
        close()
    assert (kind, message) == (CollectiveTimeout, (
        f"init: the rendezvous at 127.0.0.1:{address[1]} accepted this rank's connection but "
        "did not finish the handshake within 1 s (the launcher is overloaded, or a firewall "
        "holds the connection); set GCURUN_TIMEOUT_SECONDS to wait longer"))


def test_something_else_on_the_rendezvous_port_is_named():
    address, close = serve_once(lambda sock: sock.sendall(b"SSH-2.0-OpenSSH_9.6" + b" " * 40))
    try:
        kind, message = failure_of(address)
    finally:
        close()
    assert (kind, message) == (PeerFailureError, (
        f"init: 127.0.0.1:{address[1]} is not gcurun's rendezvous (the other end is not a "
        "gcurun endpoint of this kind); check GCURUN_RENDEZVOUS"))
