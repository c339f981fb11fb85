"""The console (gcurun's own stdout or stderr), written by a thread of its own so that
nothing in the supervising loop ever waits for a reader.

A console that does not keep up (a stopped pager, a full pipe, a slow terminal) holds at
most ``limit`` bytes of pending output; what comes beyond that is dropped, counted, and
announced by a notice at the place where it is missing once the console reads again. The
job never waits for its console: training on every host goes on at its own pace, and the
log files of ``--output-dir``, written apart from the console, keep every line.
"""

from __future__ import annotations

import collections
import math
import os
import select
import threading
import time
from collections.abc import Callable
from typing import TextIO

# Pending console output beyond this is dropped (with a counted notice).
CONSOLE_BUFFER_BYTES = 4 * 1024 * 1024


def console_key(stream: TextIO) -> object:
    """What identifies the file behind ``stream``: two streams on one file (``2>&1``)
    share one :class:`Console`, so their lines never interleave mid-line."""
    fd = _fileno(stream)
    if fd is None:
        return id(stream)
    try:
        st = os.fstat(fd)
    except OSError:
        return id(stream)
    return (st.st_dev, st.st_ino)


def _fileno(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


class Console:
    """Writes text to ``stream`` without ever blocking the caller.

    On a real file (a terminal, a pipe, a file) a daemon thread writes the bytes straight
    to its descriptor, whole and in order; a stream without one (an in-memory buffer) is
    written at once by the caller. :meth:`offer` queues text or drops it; :meth:`close`
    waits for the rest with a deadline on progress.
    """

    def __init__(self, stream: TextIO, *, limit: int = CONSOLE_BUFFER_BYTES,
                 hint: str = "") -> None:
        self._stream = stream
        self._fd = _fileno(stream)
        self._encoding = getattr(stream, "encoding", None) or "utf-8"
        self._limit = limit
        self._hint = hint
        self._pending: collections.deque[tuple[bytes, int]] = collections.deque()
        self._size = 0
        self._lines = 0                 # lines pending
        self._dropped = 0               # lines dropped since the last notice
        self.lost_lines = 0             # every line dropped or never written
        self.broken: str | None = None  # why the console stopped taking output
        self._closed = False
        self._progress = time.monotonic()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        if self._fd is not None:
            try:
                stream.flush()  # what was written through the stream comes first
            except (OSError, ValueError):
                pass

    @property
    def pending(self) -> int:
        """Bytes queued and not yet written."""
        with self._cond:
            return self._size

    def offer(self, text: str) -> bool:
        """Queue ``text`` (whole lines) to be written, or drop it when the console has
        ``limit`` bytes pending (one item always fits in an empty queue). Never blocks."""
        lines = text.count("\n") or 1
        if self._fd is None:
            return self._write_stream(text, lines)
        data = text.encode(self._encoding, errors="replace")
        with self._cond:
            if self._closed or self.broken is not None or \
                    (self._size and self._size + len(data) > self._limit):
                self._dropped += lines
                self.lost_lines += lines
                return False
            if self._dropped:
                self._push(self._notice().encode(self._encoding, errors="replace"), 1)
            self._push(data, lines)
            self._wake()
        return True

    def close(self, patience: float, give_up: Callable[[], bool] = lambda: False, *,
              at_most: float | None = None) -> None:
        """Wait until everything queued is written, or the console has taken nothing for
        ``patience`` seconds, or ``at_most`` seconds have passed, or ``give_up()`` says
        so; what is left counts as lost."""
        if self._fd is None:
            return
        end = time.monotonic() + (math.inf if at_most is None else at_most)
        with self._cond:
            self._closed = True
            if self._dropped and self.broken is None:
                self._push(self._notice().encode(self._encoding, errors="replace"), 1)
            if self._pending:
                self._wake()
            while self._pending and self.broken is None and not give_up() and \
                    time.monotonic() - self._progress < patience and time.monotonic() < end:
                self._cond.wait(0.1)
            if self._pending:
                self.lost_lines += self._lines
                self._pending.clear()
                self._size = self._lines = 0
            self._cond.notify_all()

    def force(self, text: str) -> None:
        """Queue a message of gcurun's own (a warning) even beyond the limit."""
        if self._fd is None:
            self._write_stream(text, 1)
            return
        with self._cond:
            if self._closed or self.broken is not None:
                return
            self._push(text.encode(self._encoding, errors="replace"), 0)
            self._wake()

    def _wake(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True, name="console")
            self._thread.start()
        self._cond.notify_all()

    def _push(self, data: bytes, lines: int) -> None:
        if not self._pending:
            self._progress = time.monotonic()   # patience counts from the first wait
        self._pending.append((data, lines))
        self._size += len(data)
        self._lines += lines

    def _notice(self) -> str:
        count, self._dropped = self._dropped, 0
        return (f"gcurun: {count} line{'s' if count != 1 else ''} of rank output "
                f"not shown here: the console did not take them in time{self._hint}\n")

    def _run(self) -> None:
        assert self._fd is not None
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                data, lines = self._pending[0]
            try:
                self._write_all(data)
            except OSError as exc:
                with self._cond:
                    self.broken = exc.strerror or str(exc)
                    self.lost_lines += self._lines
                    self._pending.clear()
                    self._size = self._lines = 0
                    self._cond.notify_all()
                return
            with self._cond:
                if self._pending and self._pending[0][0] is data:
                    self._pending.popleft()
                    self._size -= len(data)
                    self._lines -= lines
                self._cond.notify_all()

    def _write_all(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._fd, view):]
            except BlockingIOError:   # another program made the file non-blocking
                select.select([], [self._fd], [], 1.0)
                continue
            self._progress = time.monotonic()

    def _write_stream(self, text: str, lines: int) -> bool:
        if self.broken is not None:
            self.lost_lines += lines
            return False
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError) as exc:
            self.broken = str(exc)
            self.lost_lines += lines
            return False
        return True
