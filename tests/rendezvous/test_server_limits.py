"""The rendezvous holds a bounded number of unauthenticated connections (the newest: the
oldest makes room), drops them at the handshake deadline, and says so in a few lines, not
one per connection; however many idle connections crowd it, the job's ranks get in."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from gcurun.errors import GcurunError
from gcurun.rendezvous.client import RendezvousClient
from gcurun.rendezvous.server import RendezvousServer, new_secret
from gcurun.rendezvous.serving import REFUSALS_SHOWN
from tests.helpers import wait_for


def still_open(sock: socket.socket) -> bool:
    """Whether the server holds ``sock`` open now (it sends its challenge at once and
    closes a refused connection without a word)."""
    sock.setblocking(False)
    try:
        while sock.recv(4096):
            pass
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def test_idle_connections_are_bounded_then_dropped_at_the_deadline(caplog):
    caplog.set_level(logging.WARNING, logger="gcurun.rendezvous")
    server = RendezvousServer("127.0.0.1", 0, secret=new_secret(), size=2,
                              handshake_timeout=3.0, max_pending=64)
    with server:
        socks = [socket.create_connection(server.address, timeout=10) for _ in range(200)]
        try:
            time.sleep(1.0)
            held = [s for s in socks if still_open(s)]
            assert held == socks[-64:]
            deadline = time.monotonic() + 15
            while held and time.monotonic() < deadline:
                time.sleep(0.2)
                held = [s for s in held if still_open(s)]
            assert held == []   # dropped: no handshake within 3 s
        finally:
            for s in socks:
                s.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == REFUSALS_SHOWN + 2, lines   # the first few, a note, the total
    assert lines[0].startswith(f"rendezvous 127.0.0.1:{server.address[1]}: refused the "
                               "connection from 127.0.0.1:")
    assert lines[0].endswith(": dropped to make room: it had not authenticated and 64 "
                             "connections wait for their handshake")
    assert lines[-1] == f"rendezvous 127.0.0.1:{server.address[1]}: refused 200 connections " \
                        "in all"


def test_it_listens_on_each_address_given_and_no_other():
    server = RendezvousServer(["127.0.0.1", "127.0.0.2"], 0, secret=new_secret(), size=2)
    with server:
        port = server.address[1]
        assert server.addresses == [("127.0.0.1", port), ("127.0.0.2", port)]
        for host in ("127.0.0.1", "127.0.0.2"):
            socket.create_connection((host, port), timeout=5).close()
        try:
            socket.create_connection(("127.0.0.3", port), timeout=5).close()
        except ConnectionRefusedError:
            pass
        else:
            raise AssertionError("127.0.0.3 was answered")


def join(server: RendezvousServer, secret: bytes, size: int) -> list:
    """``size`` ranks connect and register at once; what each got (peers or the error)."""
    results: list = [None] * size

    def one(rank: int) -> None:
        client = RendezvousClient(server.address, secret, 20.0, lambda _: None)
        try:
            client.connect()
            results[rank] = client.register(1, rank, size, {"rank": rank})
        except GcurunError as exc:
            results[rank] = str(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=one, args=(r,)) for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


@pytest.mark.parametrize("idle", [70, 500])
def test_ranks_get_in_past_idle_connections_opened_before_them(idle):
    secret = new_secret()
    with RendezvousServer("127.0.0.1", 0, secret=secret, size=4) as server:
        crowd = [socket.create_connection(server.address, timeout=10) for _ in range(idle)]
        try:
            assert join(server, secret, 4) == [[{"rank": r} for r in range(4)]] * 4
        finally:
            for sock in crowd:
                sock.close()


def test_ranks_get_in_while_idle_connections_keep_coming():
    secret = new_secret()
    with RendezvousServer("127.0.0.1", 0, secret=secret, size=4) as server:
        crowd: list[socket.socket] = []
        stop = threading.Event()

        def crowding() -> None:
            while not stop.is_set() and len(crowd) < 500:
                crowd.append(socket.create_connection(server.address, timeout=10))

        opener = threading.Thread(target=crowding, daemon=True)
        opener.start()
        try:
            wait_for("the crowd to gather", lambda: len(crowd) >= 70, 30)
            assert join(server, secret, 4) == [[{"rank": r} for r in range(4)]] * 4
        finally:
            stop.set()
            opener.join(30)
            for sock in crowd:
                sock.close()
