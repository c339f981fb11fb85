"""The swap of fixed messages over a shared-memory channel (Channel.exchanger), both ends
in this process: wrap-around, a full ring, a message not there yet, stale bookkeeping and
the doorbells."""

from __future__ import annotations

import pytest

from gcurun.runtime.transport import shm

pytestmark = pytest.mark.skipif(not shm.available(), reason="shared-memory rings need "
                                "Linux on x86-64")

CAPACITY = 1000         # not a multiple of the message: swaps wrap at odd places


class Ends:
    """Both ends of one channel, and a swap from end ``a`` of ``size``-byte messages."""

    def __init__(self, size: int = 256, spins: int = 3):
        self.a, fd = shm.Channel.create(CAPACITY)
        self.b = shm.Channel(fd, creator=False, capacity=CAPACITY)
        self.send = memoryview(bytearray(size))
        self.recv = memoryview(bytearray(size))
        self.rings = 0
        self.swap = self.a.exchanger(self.send, self.recv, self.ring, spins)

    def ring(self) -> None:
        self.rings += 1

    def b_reads(self, size: int) -> bytes:
        out = memoryview(bytearray(size))
        assert self.b.incoming.read_into(out) == size
        return out.tobytes()

    def close(self) -> None:
        self.a.close()
        self.b.close()


def pattern(seed: int, size: int) -> bytes:
    return bytes((seed * 31 + i * 7) % 251 for i in range(size))


def test_swaps_carry_every_byte_across_the_end_of_the_ring() -> None:
    ends = Ends()
    try:
        for i in range(20):                     # 20 x 256 bytes: five laps of each ring
            ends.send[:] = pattern(i, 256)
            theirs = pattern(1000 + i, 256)
            assert ends.b.outgoing.write(memoryview(theirs)) == 256
            assert ends.swap() == 256
            assert ends.recv.tobytes() == theirs
            assert ends.b_reads(256) == pattern(i, 256)
        assert ends.rings == 0
    finally:
        ends.close()


def test_a_full_ring_moves_nothing() -> None:
    ends = Ends()
    try:
        assert ends.a.outgoing.write(memoryview(bytes(CAPACITY - 100))) == CAPACITY - 100
        assert ends.swap() == -1
        assert ends.b_reads(CAPACITY - 100) == bytes(CAPACITY - 100)
        assert not ends.b.incoming.readable()          # the swap wrote nothing
        ends.send[:] = pattern(7, 256)
        assert ends.b.outgoing.write(memoryview(pattern(8, 256))) == 256
        assert ends.swap() == 256                       # room again: it sees the reader's
        assert ends.recv.tobytes() == pattern(8, 256)   # progress though it kept an old one
        assert ends.b_reads(256) == pattern(7, 256)
    finally:
        ends.close()


def test_a_message_not_there_yet_is_left_to_the_caller() -> None:
    ends = Ends()
    try:
        ends.send[:] = pattern(3, 256)
        assert ends.swap() == 0                 # sent; nothing to read after the spins
        assert ends.b_reads(256) == pattern(3, 256)
        assert ends.b.outgoing.write(memoryview(pattern(4, 100))) == 100
        assert ends.swap() == 0                 # a part of the peer's message is no message
        assert ends.b_reads(256) == pattern(3, 256)
        assert ends.a.incoming.read_into(ends.recv[:100]) == 100
    finally:
        ends.close()


def test_a_sleeping_peer_gets_the_doorbell() -> None:
    ends = Ends()
    try:
        ends.b.incoming.set_sleeping(reader=True, value=True)     # waits for our message
        assert ends.swap() == 0
        assert ends.rings == 1
        ends.b.incoming.set_sleeping(reader=True, value=False)
        ends.b_reads(256)
        ends.b.outgoing.set_sleeping(reader=False, value=True)    # waits for room
        assert ends.b.outgoing.write(memoryview(pattern(5, 256))) == 256
        assert ends.swap() == 256
        assert ends.rings == 2
    finally:
        ends.close()


def test_messages_larger_than_the_ring_never_swap() -> None:
    ends = Ends(size=CAPACITY + 1)
    try:
        assert ends.swap() == -1
        assert not ends.b.incoming.readable()
    finally:
        ends.close()
