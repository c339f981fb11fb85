"""Rank output: bytes in, prefixed lines out, plus per-rank log files and stderr tails.

Executors hand over raw bytes in arbitrary chunks. A line may be split across chunks, a
UTF-8 character too; progress bars end their updates with ``\\r``. Each such segment is
written whole with the rank's prefix, so lines of different ranks never interleave.
"""

from __future__ import annotations

import codecs
import collections
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from gcurun.launch.api import OutputEvent, Stream

# Colours for rank prefixes on a terminal, cycled by rank.
_COLOURS = ("36", "33", "32", "35", "34", "31", "96", "93", "92", "95", "94", "91")
_MAX_PENDING = 64 * 1024  # a segment with no end of line is written once it grows this big


class LineSplitter:
    """Cuts one stream of bytes into text segments ending with ``\\n`` or ``\\r``."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def feed(self, data: bytes) -> list[str]:
        """Segments completed by ``data``; an incomplete tail is kept for later."""
        text = self._pending + self._decoder.decode(data)
        segments, start = [], 0
        for i, ch in enumerate(text):
            if ch == "\n" or ch == "\r":
                if ch == "\r" and i + 1 < len(text) and text[i + 1] == "\n":
                    continue  # a \r\n pair ends at the \n
                segments.append(text[start:i + 1])
                start = i + 1
        self._pending = text[start:]
        if len(self._pending) >= _MAX_PENDING:
            segments.append(self._pending)
            self._pending = ""
        return segments

    def finish(self) -> list[str]:
        """What is left at the end of the stream, as a last line."""
        rest = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        return [rest + "\n"] if rest else []


class OutputSink:
    """Writes rank output to the console (with ``[rank]`` prefixes) and log files.

    ``show_ranks`` limits what reaches the console; log files and tails get everything.
    """

    def __init__(
        self,
        stdout: TextIO,
        stderr: TextIO,
        *,
        color: bool = False,
        show_ranks: Iterable[int] | None = None,
        output_dir: str | None = None,
        tail_lines: int = 20,
        timestamps: bool = False,
    ) -> None:
        self._streams = {"stdout": stdout, "stderr": stderr}
        self._color = color
        self._timestamps = timestamps
        self._show = None if show_ranks is None else frozenset(show_ranks)
        self._dir = Path(output_dir) if output_dir else None
        self._splitters: dict[tuple[int, Stream], LineSplitter] = {}
        self._files: dict[tuple[int, Stream], object] = {}
        self._tails: dict[int, collections.deque[str]] = collections.defaultdict(
            lambda: collections.deque(maxlen=tail_lines))
        if self._dir:
            self._dir.mkdir(parents=True, exist_ok=True)

    def prefix(self, rank: int) -> str:
        if self._color:
            return f"\x1b[{_COLOURS[rank % len(_COLOURS)]}m[{rank}]\x1b[0m "
        return f"[{rank}] "

    def log_path(self, rank: int, stream: Stream) -> Path | None:
        return self._dir / f"rank-{rank}.{stream}.log" if self._dir else None

    def write(self, event: OutputEvent) -> None:
        key = (event.rank, event.stream)
        splitter = self._splitters.setdefault(key, LineSplitter())
        self._log(key, event.data)
        segments = splitter.feed(event.data) if event.data else splitter.finish()
        self._emit(event.rank, event.stream, segments)

    def finish_all(self) -> None:
        """Flush partial lines of every stream (the job is over) and close log files."""
        for (rank, stream), splitter in self._splitters.items():
            self._emit(rank, stream, splitter.finish())
        for f in self._files.values():
            f.close()  # type: ignore[attr-defined]
        self._files.clear()
        for s in self._streams.values():
            s.flush()

    def tail(self, rank: int) -> tuple[str, ...]:
        """The last lines rank wrote to stderr (for the failure report)."""
        return tuple(self._tails.get(rank, ()))

    def _emit(self, rank: int, stream: Stream, segments: list[str]) -> None:
        if not segments:
            return
        if stream == "stderr":
            self._tails[rank].extend(s.rstrip("\r\n") for s in segments if s.strip())
        if self._show is not None and rank not in self._show:
            return
        out = self._streams[stream]
        prefix = self.prefix(rank)
        if self._timestamps:
            # horovodrun's -prefix-timestamp: the time the launcher saw the line
            now = time.time()
            prefix = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + \
                f".{int(now % 1 * 1000):03d} " + prefix
        out.write("".join(prefix + s for s in segments))
        out.flush()

    def _log(self, key: tuple[int, Stream], data: bytes) -> None:
        path = self.log_path(*key)
        if path is None or not data:
            return
        f = self._files.get(key)
        if f is None:
            f = self._files[key] = open(path, "ab", buffering=0)  # noqa: SIM115
        f.write(data)  # type: ignore[attr-defined]

