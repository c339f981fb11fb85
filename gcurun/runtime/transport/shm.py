"""Byte streams through shared memory between two ranks of one host.

A link between ranks of one host carries its bytes through two single-producer,
single-consumer rings in one ``memfd`` the two processes share (the connecting rank
creates it and hands the descriptor over the Unix socket); no system call moves a byte.
The Unix socket stays: it rings a doorbell for a side that went to sleep, and its end of
file tells of a peer's death.

Correctness rests on x86's total store order: the data is stored before the counter that
publishes it, and read before the counter that frees it; so the rings are used on x86-64
only (elsewhere links fall back to the socket). The sleep flags can race with a producer
(a store-load reorder), so a sleeper sleeps in naps, each a twentieth of the time it has
waited so far and at most ``NAP_MAX_SECONDS``: a lost doorbell costs a nap, never a hang.
"""

from __future__ import annotations

import mmap
import os
import platform
import socket
import sys
from collections.abc import Callable

RING_BYTES = 1 << 20
CONTROL_BYTES = 4096
NAP_MAX_SECONDS = 0.02
# Indices of the control words (8-byte words, each on its own cache line).
HEAD, TAIL, READER_SLEEPS, WRITER_SLEEPS = 0, 8, 16, 24


def available() -> bool:
    """Whether this process can use shared-memory rings at all."""
    return (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
            and hasattr(os, "memfd_create") and hasattr(socket, "send_fds"))


class Ring:
    """One direction of a channel, seen from one side (writer or reader)."""

    __slots__ = ("_data", "_words", "_capacity")

    def release(self) -> None:
        self._data.release()
        self._words.release()

    def __init__(self, region: memoryview, capacity: int):
        self._words = region[:CONTROL_BYTES].cast("Q")
        self._data = region[CONTROL_BYTES:CONTROL_BYTES + capacity]
        self._capacity = capacity

    # -- writer ---------------------------------------------------------------------------

    def write(self, src: memoryview) -> int:
        """Copy as much of ``src`` as fits; return how many bytes."""
        words, capacity = self._words, self._capacity
        head = words[HEAD]
        count = capacity - (head - words[TAIL])
        if count > len(src):
            count = len(src)
        if count <= 0:
            return 0
        start = head % capacity
        first = capacity - start
        if first > count:
            first = count
        self._data[start:start + first] = src[:first]
        if count > first:
            self._data[:count - first] = src[first:count]
        words[HEAD] = head + count            # publish after the data is stored
        return count

    def writable(self) -> bool:
        words = self._words
        return words[HEAD] - words[TAIL] < self._capacity

    # -- reader ---------------------------------------------------------------------------

    def read_into(self, dst: memoryview) -> int:
        """Copy as many waiting bytes as ``dst`` holds; return how many."""
        words, capacity = self._words, self._capacity
        tail = words[TAIL]
        count = words[HEAD] - tail
        if count > len(dst):
            count = len(dst)
        if count <= 0:
            return 0
        start = tail % capacity
        first = capacity - start
        if first > count:
            first = count
        dst[:first] = self._data[start:start + first]
        if count > first:
            dst[first:count] = self._data[:count - first]
        words[TAIL] = tail + count             # free after the data is read
        return count

    def readable(self) -> bool:
        words = self._words
        return words[HEAD] != words[TAIL]

    # -- sleeping -------------------------------------------------------------------------

    def set_sleeping(self, reader: bool, value: bool) -> None:
        self._words[READER_SLEEPS if reader else WRITER_SLEEPS] = int(value)

    def sleeping(self, reader: bool) -> bool:
        return bool(self._words[READER_SLEEPS if reader else WRITER_SLEEPS])


class Channel:
    """Both directions of a link: ``outgoing`` (this side writes) and ``incoming``."""

    def __init__(self, fd: int, creator: bool, capacity: int = RING_BYTES):
        size = 2 * (CONTROL_BYTES + capacity)
        try:
            self._map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
        finally:
            os.close(fd)
        self._region = memoryview(self._map)
        half = CONTROL_BYTES + capacity
        first = Ring(self._region[:half], capacity)
        second = Ring(self._region[half:], capacity)
        self.outgoing, self.incoming = (first, second) if creator else (second, first)

    def exchanger(self, send: memoryview, recv: memoryview, doorbell: Callable[[], None],
                  spins: int) -> Callable[[], int]:
        """A function that swaps two fixed messages (the negotiation block of every
        collective): it writes all of ``send`` to the outgoing ring, or nothing when the
        ring lacks the room (it then returns -1), and reads all of ``recv`` from the
        incoming ring, checking up to ``spins`` times for the whole message; it returns
        ``len(recv)`` or 0 when the message is not there yet (the caller then waits for
        it the general way). ``doorbell()`` wakes the peer when it sleeps on either ring.

        This is the latency of the smallest collectives, so the ring bookkeeping of
        :meth:`Ring.write` and :meth:`Ring.read_into` is written out with every name in
        a closure cell.
        """
        out_words, out_data = self.outgoing._words, self.outgoing._data
        in_words, in_data = self.incoming._words, self.incoming._data
        capacity = self.outgoing._capacity
        size, wanted = len(send), len(recv)
        if size > capacity or wanted > capacity:
            return lambda: -1
        most_waiting = capacity - size    # for ``send`` to fit
        # The reader's last known position: it only grows, so an old value only
        # understates the room, and the peer's cache line is read when room runs short.
        freed = out_words[TAIL]

        def run() -> int:
            nonlocal freed
            head = out_words[HEAD]
            if head - freed > most_waiting:
                freed = out_words[TAIL]
                if head - freed > most_waiting:
                    return -1
            start = head % capacity
            end = start + size
            if end <= capacity:
                out_data[start:end] = send
            else:
                first = capacity - start
                out_data[start:] = send[:first]
                out_data[:end - capacity] = send[first:]
            out_words[HEAD] = head + size             # publish after the data is stored
            if out_words[READER_SLEEPS]:
                doorbell()
            tail = in_words[TAIL]
            done = tail + wanted
            if in_words[HEAD] < done:
                for _ in range(spins):
                    if in_words[HEAD] >= done:
                        break
                else:
                    return 0
            start = tail % capacity
            end = start + wanted
            if end <= capacity:
                recv[:] = in_data[start:end]
            else:
                first = capacity - start
                recv[:first] = in_data[start:]
                recv[first:] = in_data[:end - capacity]
            in_words[TAIL] = done                     # free after the data is read
            if in_words[WRITER_SLEEPS]:
                doorbell()
            return wanted

        return run

    @staticmethod
    def create(capacity: int = RING_BYTES) -> tuple[Channel, int]:
        """A new channel and a descriptor of its memory to hand to the peer (the caller
        closes the descriptor once handed over)."""
        fd = os.memfd_create("gcurun-link", os.MFD_CLOEXEC)
        os.ftruncate(fd, 2 * (CONTROL_BYTES + capacity))
        return Channel(os.dup(fd), creator=True, capacity=capacity), fd

    def close(self) -> None:
        self.outgoing.release()
        self.incoming.release()
        self._region.release()
        try:
            self._map.close()
        except BufferError:
            pass        # a view is still alive somewhere; the mapping goes with the process
