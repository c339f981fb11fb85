"""Rank output: bytes in, prefixed lines out, plus per-rank log files and stderr tails.

Executors hand over raw bytes in arbitrary chunks. A line may be split across chunks, a
UTF-8 character too; progress bars end their updates with ``\\r``. Each such segment is
written whole with the rank's prefix, so lines of different ranks never interleave. A line
longer than :data:`PIECE_CHARS` reaches the console in pieces of that size, each on a
console line of its own with the rank's prefix (the log files keep it whole), so the
launcher holds at most one piece of any line.

The console never makes the job wait (see :mod:`.console`), and neither do the log files:
a log that cannot be written (a full disk) is warned about once, left incomplete, and
named at the end; the job and its console output go on.
"""

from __future__ import annotations

import codecs
import collections
import datetime
import os
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO, TextIO

from gcurun.launch.api import LauncherNoticeEvent, OutputEvent, Stream
from gcurun.launch.supervision.console import Console, console_key

# Colours for rank prefixes on a terminal, cycled by rank.
_COLOURS = ("36", "33", "32", "35", "34", "31", "96", "93", "92", "95", "94", "91")
PIECE_CHARS = 64 * 1024  # a longer line reaches the console in pieces of this many characters
_LINE_END = re.compile(r"\r\n|\n|\r")
# At the end of a job the console gets this long without taking anything before what it
# has not taken is given up (a pager left open); after a signal, this long in all.
CONSOLE_PATIENCE = 30.0
CONSOLE_PATIENCE_INTERRUPTED = 1.0


class LineSplitter:
    """Cuts one stream of bytes into text segments ending with ``\\n`` or ``\\r``, or
    pieces of :data:`PIECE_CHARS` characters of a longer line."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def feed(self, data: bytes) -> list[str]:
        """Segments completed by ``data``; an incomplete tail is kept for later."""
        text = self._pending + self._decoder.decode(data)
        segments: list[str] = []
        start = 0
        for match in _LINE_END.finditer(text):
            segments.extend(_pieces(text[start:match.end()]))
            start = match.end()
        rest = text[start:]
        whole = len(rest) - len(rest) % PIECE_CHARS
        segments.extend(rest[i:i + PIECE_CHARS] for i in range(0, whole, PIECE_CHARS))
        self._pending = rest[whole:]
        return segments

    def finish(self) -> list[str]:
        """What is left at the end of the stream, as a last line."""
        rest = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        return [rest + "\n"] if rest else []


def _pieces(segment: str) -> list[str]:
    if len(segment) <= PIECE_CHARS:
        return [segment]
    return [segment[i:i + PIECE_CHARS] for i in range(0, len(segment), PIECE_CHARS)]


def job_log_directory(output_dir: str, *, now: datetime.datetime | None = None,
                      pid: int | None = None) -> str:
    """A directory of its own for one job's logs under ``output_dir``:
    ``output_dir/YYYYMMDD-HHMMSS-PID`` (``-2``, ``-3``... on a clash), made here, with
    ``output_dir/latest`` pointing at it. A directory that cannot be made is returned
    all the same: the job's sink warns about it and the job runs without logs."""
    base = Path(output_dir).expanduser()
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    name = f"{stamp}-{pid or os.getpid()}"
    try:
        base.mkdir(parents=True, exist_ok=True)
        for n in range(1, 1000):
            candidate = name if n == 1 else f"{name}-{n}"
            try:
                (base / candidate).mkdir()
            except FileExistsError:
                continue
            name = candidate
            break
        _point_latest(base, name)
    except OSError:
        pass
    return str(base / name)


def _point_latest(base: Path, name: str) -> None:
    """``base/latest`` -> ``name``, replaced in one step (concurrent jobs: the last wins)."""
    link = base / f".latest-{os.getpid()}"
    try:
        link.unlink(missing_ok=True)
        link.symlink_to(name)
        os.replace(link, base / "latest")
    except OSError:
        link.unlink(missing_ok=True)


class LogFiles:
    """The per-rank log files of ``directory``: raw bytes, appended as they come. A file
    that cannot be written is closed and left incomplete; ``warn`` is called once for
    each kind of error, naming the first file it hit."""

    def __init__(self, directory: Path, warn: Callable[[str], None]) -> None:
        self._dir = directory
        self._warn = warn
        self._files: dict[Path, BinaryIO] = {}
        self.failed: dict[Path, str] = {}   # incomplete file -> why
        self._warned: set[str] = set()
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._fail(directory, exc)

    def write(self, path: Path, data: bytes) -> None:
        if path in self.failed or self._dir in self.failed:
            return
        try:
            f = self._files.get(path)
            if f is None:
                f = self._files[path] = open(path, "ab", buffering=0)  # noqa: SIM115
            view = memoryview(data)
            while view:
                view = view[f.write(view) or 0:]
        except OSError as exc:
            self._fail(path, exc)

    def close(self) -> None:
        for path, f in list(self._files.items()):
            try:
                f.close()
            except OSError as exc:
                self._fail(path, exc)
        self._files.clear()

    def _fail(self, path: Path, exc: OSError) -> None:
        why = exc.strerror or str(exc)
        self.failed[path] = why
        f = self._files.pop(path, None)
        if f is not None:
            try:
                f.close()
            except OSError:
                pass
        if why not in self._warned:
            self._warned.add(why)
            self._warn(f"cannot write {path}: {why}; the job goes on, but this log (and "
                       "any other that fails) is incomplete; the end of the job lists them")


class OutputSink:
    """Writes rank output to the console (with ``[rank]`` prefixes) and log files.

    ``show_ranks`` limits what reaches the console; log files and tails get everything.
    Neither the console nor the logs ever block or fail the job; :meth:`finish_all` says
    at the end what the console did not show and which logs are incomplete.
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
        self._color = color
        self._timestamps = timestamps
        self._show = None if show_ranks is None else frozenset(show_ranks)
        self._dir = Path(output_dir) if output_dir else None
        hint = f" (every line is in the logs under {self._dir})" if self._dir else ""
        consoles: dict[object, Console] = {}
        for stream in (stdout, stderr):   # one console per file: 2>&1 shares one
            console = Console(stream, hint=hint)   # (each flushes what its stream holds)
            consoles.setdefault(console_key(stream), console)
        self._consoles = {"stdout": consoles[console_key(stdout)],
                          "stderr": consoles[console_key(stderr)]}
        self._splitters: dict[tuple[int, Stream], LineSplitter] = {}
        self._tails: dict[int, collections.deque[str]] = collections.defaultdict(
            lambda: collections.deque(maxlen=tail_lines))
        self._logs = LogFiles(self._dir, self.warn) if self._dir else None
        self._finished = False

    def prefix(self, rank: int) -> str:
        if self._color:
            return f"\x1b[{_COLOURS[rank % len(_COLOURS)]}m[{rank}]\x1b[0m "
        return f"[{rank}] "

    def log_path(self, rank: int, stream: Stream) -> Path | None:
        return self._dir / f"rank-{rank}.{stream}.log" if self._dir else None

    def warn(self, message: str) -> None:
        """A warning of gcurun's own, on the console's stderr (never blocking)."""
        self._consoles["stderr"].force(f"gcurun: warning: {message}\n")

    def notice(self, event: LauncherNoticeEvent) -> None:
        """A launcher program's own line (``[mpirun] text``), on the console's stderr."""
        self._consoles["stderr"].force(f"[{event.source}] {event.text}")

    def write(self, event: OutputEvent) -> None:
        key = (event.rank, event.stream)
        splitter = self._splitters.setdefault(key, LineSplitter())
        path = self.log_path(*key)
        if self._logs is not None and path is not None and event.data:
            self._logs.write(path, event.data)
        segments = splitter.feed(event.data) if event.data else splitter.finish()
        self._emit(event.rank, event.stream, segments)

    def finish_all(self, patience: float = CONSOLE_PATIENCE,
                   give_up: Callable[[], bool] = lambda: False, *,
                   at_most: float | None = None) -> None:
        """Flush partial lines of every stream (the job is over), close log files, say
        what went missing, and give the console up to ``patience`` seconds without
        progress (``at_most`` seconds in all, or until ``give_up()``) to take the rest.
        Idempotent."""
        if self._finished:
            return
        self._finished = True
        for (rank, stream), splitter in self._splitters.items():
            self._emit(rank, stream, splitter.finish())
        if self._logs is not None:
            self._logs.close()
        err = self._consoles["stderr"]
        if self._consoles["stdout"] is not err:
            self._consoles["stdout"].close(patience, give_up, at_most=at_most)
        for message in self.losses():
            self.warn(message)
        err.close(patience, give_up, at_most=at_most)

    def losses(self) -> list[str]:
        """What the console did not show and which logs are incomplete, as sentences."""
        found = []
        for name, console in self._consoles.items():
            if name == "stderr" and console is self._consoles["stdout"]:
                continue
            if console.lost_lines:
                why = f" ({console.broken})" if console.broken else ""
                found.append(f"{console.lost_lines} line(s) of rank output to {name} were "
                             f"not shown: the console did not take them{why}")
        if self._logs is not None and self._logs.failed:
            listed = ", ".join(f"{path} ({why})" for path, why in self._logs.failed.items())
            found.append(f"incomplete logs: {listed}")
        return found

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
        prefix = self.prefix(rank)
        if self._timestamps:
            # horovodrun's -prefix-timestamp: the time the launcher saw the line
            now = time.time()
            prefix = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + \
                f".{int(now % 1 * 1000):03d} " + prefix
        self._consoles[stream].offer("".join(
            prefix + (s if s.endswith(("\n", "\r")) else s + "\n") for s in segments))
