"""How the transports wait for a peer: a short spin, then sleep (poll on tcp, test and
sleep on mpi), the spin learned from the waits before; on tcp a wait on sockets alone
sleeps at once."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from gcurun.runtime.transport import _waiting, links, mpi, shm
from gcurun.runtime.transport._waiting import SPIN_MAX_SECONDS, SPIN_MIN_SECONDS, Spin, nap

LATE = 0.008        # the peer's answer comes this late, in each of the waits below
WAITS = 6
# Most of the waits' lateness spent asleep (a busy machine only makes the answers later): the
# old waits, spinning for 5 ms (tcp) or yielding in a loop (mpi), slept less than this.
ASLEEP = 0.5 * WAITS * LATE


def test_the_spin_follows_the_waits() -> None:
    spin = Spin()
    assert spin.seconds == SPIN_MAX_SECONDS
    spin.ended(0.5)                     # a long wait: spin less
    assert spin.seconds == SPIN_MAX_SECONDS / 2
    for _ in range(20):
        spin.ended(0.5)
    assert spin.seconds == SPIN_MIN_SECONDS
    spin.ended(200e-6)                  # a short one: spin long enough to catch it
    assert spin.seconds == 400e-6
    spin.ended(10e-6)                   # shorter still: the spin stays
    assert spin.seconds == 400e-6
    assert nap(0.0) == _waiting.NAP_MIN_SECONDS
    assert nap(1e-3) == pytest.approx(50e-6)
    assert nap(10.0) == _waiting.NAP_MAX_SECONDS


class Late:
    """A request (and mpi4py's Request.Testall over such) done ``LATE`` after made."""

    def __init__(self) -> None:
        self.done_at = time.monotonic() + LATE

    def Test(self) -> bool:  # noqa: N802 - mpi4py's name
        return time.monotonic() >= self.done_at

    @staticmethod
    def Testall(requests: list[Late]) -> bool:  # noqa: N802
        return all(request.Test() for request in requests)


def test_an_mpi_wait_for_a_late_peer_sleeps_after_a_short_spin(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Most of each wait is spent asleep (the old wait yielded the CPU in a loop for
    10 ms, so a peer 8 ms late cost a core all along)."""
    transport: Any = object.__new__(mpi.MPITransport)
    transport._mpi = type("FakeMPI", (), {"Request": Late})
    transport.timeout, transport._spin = 10.0, Spin()
    slept = _record_sleeps(monkeypatch, mpi.time)
    monkeypatch.setattr(mpi, "yield_ran_others", lambda: False, raising=False)  # (busy hosts aside)
    for _ in range(WAITS):
        transport._wait([Late()], [1])
    assert sum(slept) > ASLEEP, slept


@pytest.mark.parametrize("busy", [False, True])
def test_a_tcp_wait_on_sockets_alone_sleeps_at_once(monkeypatch: pytest.MonkeyPatch,
                                                     busy: bool) -> None:
    """Peers on other hosts answer through the kernel, which wakes a sleeping wait: on a
    quiet host and on a busy one (whose yields run other threads) it neither spins nor
    yields, and nearly all of each wait is spent in poll(). (It spun for 5 ms once, later
    up to 1 ms and then yielded in a loop on a busy host, for a whole transfer.)"""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    mover = links.Mover(10.0, lambda: None, lambda peer, what: AssertionError(what))
    link = links.Link(ours, 1, 0, False, False, None)
    polled, _ = _record_polls(monkeypatch)
    yields: list[int] = []
    monkeypatch.setattr(links, "yield_ran_others", lambda: yields.append(1) or busy)
    try:
        for _ in range(WAITS):
            link.recvs.append([memoryview(bytearray(1)), 0, None])
            answer = threading.Timer(LATE, theirs.send, (b"x",))
            answer.start()
            mover.progress([link])
            answer.join()
        assert yields == [] and sum(polled) > 0.8 * WAITS * LATE, (yields, polled)
    finally:
        ours.close()
        theirs.close()


@pytest.mark.skipif(not shm.available(), reason="shared-memory rings need Linux on x86-64")
def test_a_wait_whose_rings_are_done_sleeps_on_its_sockets_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One exchange over a ring (a peer on this host) and a socket (a peer on another
    host, as in the two-level allreduce's ticks): the ring's part ends at once, the
    socket's comes late. The rest of the wait is on the socket alone, so it sleeps in
    poll() as if no ring were there (it spun and then yielded in a loop on a busy host
    until the socket's bytes came: a third of the engine's CPU on 2 x 2 ranks)."""
    ring_ours, ring_theirs = socket.socketpair()
    ours, theirs = socket.socketpair()
    for sock in (ring_ours, ours):
        sock.setblocking(False)
    channel, fd = shm.Channel.create()
    peer_channel = shm.Channel(fd, creator=False)
    mover = links.Mover(10.0, lambda: None, lambda peer, what: AssertionError(what))
    ring = links.Link(ring_ours, 1, 0, False, False, channel)
    link = links.Link(ours, 2, 0, False, False, None)
    polled, _ = _record_polls(monkeypatch)
    yields: list[int] = []
    monkeypatch.setattr(links, "yield_ran_others", lambda: yields.append(1) or True)
    monkeypatch.setattr(links.os, "sched_yield", lambda: yields.append(1))
    try:
        for _ in range(WAITS):
            got = bytearray(4)
            ring.sends.append([memoryview(b"mine"), 0, None])
            ring.recvs.append([memoryview(got), 0, None])
            peer_channel.outgoing.write(memoryview(b"peer"))
            link.recvs.append([memoryview(bytearray(1)), 0, None])
            answer = threading.Timer(LATE, theirs.send, (b"x",))
            answer.start()
            mover.progress([ring, link])
            answer.join()
            assert bytes(got) == b"peer"
            assert peer_channel.incoming.read_into(memoryview(bytearray(4))) == 4
        assert yields == [] and sum(polled) > 0.8 * WAITS * LATE, (yields, polled)
    finally:
        for sock in (ring_ours, ring_theirs, ours, theirs):
            sock.close()
        peer_channel.close()
        channel.close()


def test_a_sleeping_socket_wait_wakes_per_64_kib_not_per_packet(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A message that trickles in (a shaped link) wakes its wait when the rest of it, or
    64 KiB, has come: a few times, not once per packet."""
    listener = socket.create_server(("127.0.0.1", 0))
    sender = socket.create_connection(listener.getsockname())
    sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ours, _ = listener.accept()
    ours.setblocking(False)
    mover = links.Mover(10.0, lambda: None, lambda peer, what: AssertionError(what))
    link = links.Link(ours, 1, 0, False, False, None)
    message = bytes(range(256)) * ((2 * links.WAKE_BYTES + 4000) // 256)
    got = bytearray(len(message))
    link.recvs.append([memoryview(got), 0, None])
    piece = 1000

    def trickle() -> None:
        for start in range(0, len(message), piece):
            sender.sendall(message[start:start + piece])
            time.sleep(0.0005)

    _, wakes = _record_polls(monkeypatch)
    peer = threading.Thread(target=trickle)
    peer.start()
    try:
        mover.progress([link])
        assert got == message
        # ~130 pieces: without SO_RCVLOWAT nearly every one woke the wait.
        assert len(wakes) <= 8, len(wakes)
    finally:
        peer.join()
        for sock in (ours, sender, listener):
            sock.close()


@pytest.mark.skipif(not shm.available(), reason="shared-memory rings need Linux on x86-64")
def test_a_peer_that_leaves_right_after_its_last_bytes_is_no_failure() -> None:
    """A peer writes its last message into the ring, rings the doorbell and closes its
    socket (its collectives are done: it shuts down) while this rank sleeps waiting for
    that message. The end of the socket must not hide the bytes before it: the message
    is read and the exchange completes (it raised 'closed its connection', and in a
    job's last cycle cost a second's wait for an abort that never came)."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    channel, fd = shm.Channel.create()
    peer_channel = shm.Channel(fd, creator=False)
    failures: list[str] = []

    def failure(peer: int, what: str) -> Exception:
        failures.append(what)
        return AssertionError(f"rank {peer}: {what}")

    mover = links.Mover(10.0, lambda: None, failure)        # type: ignore[arg-type]
    link = links.Link(ours, 1, 0, False, False, channel)
    got = bytearray(5)
    link.recvs.append([memoryview(got), 0, None])

    def leave() -> None:
        peer_channel.outgoing.write(memoryview(b"last!"))
        theirs.send(b"\x07")
        theirs.close()

    peer = threading.Timer(LATE * 3, leave)     # well after this rank went to sleep
    peer.start()
    try:
        mover.progress([link])
        assert bytes(got) == b"last!" and failures == []
        link.recvs.append([memoryview(bytearray(1)), 0, None])     # nothing will come
        with pytest.raises(AssertionError, match="rank 1: it closed its connection"):
            mover.progress([link])
    finally:
        peer.join()
        ours.close()
        peer_channel.close()
        channel.close()


def _record_sleeps(monkeypatch: pytest.MonkeyPatch, time_module: Any) -> list[float]:
    slept: list[float] = []
    real = time_module.sleep

    def sleep(seconds: float) -> None:
        began = time.monotonic()
        real(seconds)
        slept.append(time.monotonic() - began)

    monkeypatch.setattr(time_module, "sleep", sleep)
    return slept


def _record_polls(monkeypatch: pytest.MonkeyPatch) -> tuple[list[float], list[float]]:
    """The time spent in poll() calls that waited (a timeout given), and when those of
    them that woke with an event returned."""
    polled: list[float] = []
    wakes: list[float] = []
    real_poll = links.select.poll

    class Poll:
        def __init__(self) -> None:
            self._poll = real_poll()

        def register(self, *args: Any) -> None:
            self._poll.register(*args)

        def poll(self, timeout: int | None = None) -> list:
            began = time.monotonic()
            events = self._poll.poll(timeout)
            if timeout:
                polled.append(time.monotonic() - began)
                if events:
                    wakes.append(time.monotonic())
            return events

    monkeypatch.setattr(links.select, "poll", Poll)
    return polled, wakes
