"""Byte streams through shared memory between two ranks of one host.

A link between ranks of one host carries its bytes through two single-producer,
single-consumer rings in one ``memfd`` the two processes share (the connecting rank
creates it and hands the descriptor over the Unix socket); no system call moves a byte.
The Unix socket stays: it rings a doorbell for a side that went to sleep, and its end of
file tells of a peer's death.

Correctness rests on x86's total store order: the data is stored before the counter that
publishes it, and read before the counter that frees it; so the rings are used on x86-64
only (elsewhere links fall back to the socket). The sleep flags can race with a producer
(a store-load reorder), so a sleeper never sleeps longer than ``NAP_SECONDS`` at a time:
a lost doorbell costs a nap, never a hang.
"""

from __future__ import annotations

import mmap
import os
import platform
import socket
import sys

RING_BYTES = 1 << 20
CONTROL_BYTES = 4096
NAP_SECONDS = 0.002
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

    def write_all(self, src: memoryview) -> bool:
        """Copy all of ``src`` if it fits (else nothing); return whether it did."""
        words = self._words
        if self._capacity - (words[HEAD] - words[TAIL]) < len(src):
            return False
        self.write(src)
        return True

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
