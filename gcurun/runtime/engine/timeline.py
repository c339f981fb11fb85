"""The engine's Chrome trace (chrome://tracing, Perfetto): what each tensor waited for and
what its collective spent time on.

Every tensor gets a row (a trace "process" named after the tensor): a NEGOTIATE_<OP> span
from the moment the writing rank first sees it until every rank has submitted it, with
an instant mark named after each rank as it becomes ready; then the op span (ALLREDUCE,
ALLGATHER, ...) with its activities nested inside (QUEUE, MEMCPY_IN_FUSION_BUFFER, the
ring phases, MEMCPY_OUT_FUSION_BUFFER). Row 0 holds the engine's cycle marks.

The file is valid JSON after every write: it always ends with the array's closing
bracket, and each flush overwrites that bracket with the new events and a new bracket in
one ``pwrite``. A job that crashes or is killed between flushes leaves a complete trace of
what was flushed. Past ``max_bytes`` the writer records one last event saying so and
stops. Row 0's name event carries the trace's start as wall-clock time
(``start_time_since_epoch_in_micros``, Horovod's key): timestamps count from there.
"""

from __future__ import annotations

import json
import os
import time

from gcurun.errors import UsageError

FLUSH_EVENTS = 2000
FLUSH_SECONDS = 1.0
TAIL = b"\n]"
# Room kept for the event that says the size cap was reached.
CAP_RESERVE = 256


def timeline_path(template: str, rank: int) -> str | None:
    """Where ``rank`` writes its trace: every rank when the path contains ``{rank}``,
    else rank 0 alone (it coordinates, so it sees every rank's readiness)."""
    if "{rank}" in template:
        return template.replace("{rank}", str(rank))
    return template if rank == 0 else None


class Timeline:
    """Writes trace events of one rank. Used by the engine thread only."""

    def __init__(self, path: str, *, max_bytes: int, mark_cycles: bool, rank: int,
                 size: int):
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise UsageError(f"GCURUN_TIMELINE_FILENAME={path!r}: cannot write the timeline "
                             f"there ({exc.strerror}); give a writable file path") from None
        os.write(self._fd, b"[" + TAIL)
        self.path = path
        self.mark_cycles = mark_cycles
        self._end = 1                          # where the closing bracket starts
        self._max_bytes = max(max_bytes, 4096)
        self._events: list[str] = []
        self._first = True
        self._full = False
        self._last_flush = time.monotonic()
        self._start_ns = time.monotonic_ns()
        self._rows: dict[str, int] = {}
        # Timestamps count from the trace's start; its wall-clock time (Horovod's key)
        # lines up traces of different ranks or runs.
        self._meta(0, f"gcurun engine (rank {rank} of {size})",
                   f',"start_time_since_epoch_in_micros":{time.time_ns() // 1000}')

    # -- events ---------------------------------------------------------------------------

    def _ts(self, ns: int) -> str:
        return f"{(ns - self._start_ns) / 1000:.3f}"

    def _meta(self, row: int, title: str, args: str = "") -> None:
        self._events.append(f'{{"name":"process_name","ph":"M","ts":0,"pid":{row},"tid":0,'
                            f'"args":{{"name":{json.dumps(title)}{args}}}}}')
        self._events.append(f'{{"name":"process_sort_index","ph":"M","ts":0,"pid":{row},'
                            f'"tid":0,"args":{{"sort_index":{row}}}}}')

    def _row(self, tensor: str) -> int:
        row = self._rows.get(tensor)
        if row is None:
            row = self._rows[tensor] = len(self._rows) + 1
            self._meta(row, tensor)
        return row

    def _emit(self, name: str, phase: str, tensor: str, ns: int, extra: str = "") -> None:
        if not self._full:
            self._events.append(f'{{"name":"{name}","ph":"{phase}","ts":{self._ts(ns)},'
                                f'"pid":{self._row(tensor)},"tid":0{extra}}}')

    def negotiate_start(self, tensor: str, op: str, ns: int) -> None:
        self._emit(f"NEGOTIATE_{op}", "B", tensor, ns)

    def negotiate_rank(self, tensor: str, rank: int, ns: int) -> None:
        """The instant ``rank`` was seen ready for ``tensor``."""
        self._emit(str(rank), "i", tensor, ns, ',"s":"p"')

    def negotiate_end(self, tensor: str, ns: int) -> None:
        self._emit("NEGOTIATE", "E", tensor, ns)

    def op_start(self, tensor: str, op: str, ns: int) -> None:
        self._emit(op, "B", tensor, ns)

    def op_end(self, tensor: str, ns: int, error: str | None = None) -> None:
        extra = f',"args":{{"error":{json.dumps(error)}}}' if error else ""
        self._emit("OP", "E", tensor, ns, extra)

    def activity(self, tensor: str, activity: str, start_ns: int, end_ns: int,
                 args: str = "") -> None:
        """A complete span of one activity nested in the op span."""
        if not self._full:
            extra = f',"args":{args}' if args else ""
            self._events.append(
                f'{{"name":"{activity}","ph":"X","ts":{self._ts(start_ns)},'
                f'"dur":{(end_ns - start_ns) / 1000:.3f},"pid":{self._row(tensor)},'
                f'"tid":0{extra}}}')

    def cycle(self, ns: int) -> None:
        if self.mark_cycles and not self._full:
            self._events.append(f'{{"name":"CYCLE_START","ph":"i","s":"g",'
                                f'"ts":{self._ts(ns)},"pid":0,"tid":0}}')

    # -- writing --------------------------------------------------------------------------

    def maybe_flush(self) -> None:
        """Flush when enough events wait or a second has passed since the last flush."""
        if len(self._events) >= FLUSH_EVENTS or (
                self._events and time.monotonic() - self._last_flush > FLUSH_SECONDS):
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._events or self._fd < 0:
            self._events.clear()
            return
        events, self._events = self._events, []
        body = ",\n".join(events)
        data = (b"\n" if self._first else b",\n") + body.encode() + TAIL
        if self._end + len(data) > self._max_bytes - CAP_RESERVE:
            data = (b"\n" if self._first else b",\n") + (
                '{"name":"TIMELINE_SIZE_CAP_REACHED","ph":"i","s":"g","ts":'
                f'{self._ts(time.monotonic_ns())},"pid":0,"tid":0,"args":{{"max_bytes":'
                f'{self._max_bytes}}}}}').encode() + TAIL
            self._full = True
        os.pwrite(self._fd, data, self._end)
        self._end += len(data) - len(TAIL)
        self._first = False
        if self._full:
            self._close_fd()

    def close(self) -> None:
        if self._fd >= 0:
            self.flush()
            self._close_fd()

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
