"""The launcher's end of one bootstrap (:mod:`gcurun.launch.remote.bootstrap`): the ranks
it runs, the job sent to it in messages of bounded size, its frames turned into events.

Two executors use it: the ranks of each SSH host (:mod:`gcurun.launch.ssh.rank_group`)
and the ranks of this host (:mod:`gcurun.launch.local_group`), whose bootstrap runs over
pipes. Either way a stop is one ``terminate`` message, and a launcher that dies closes the
channel, on which the bootstrap stops every rank. A channel that goes silent instead (a
cut link) is covered by :meth:`BootstrapGroup.keep_alive`: pings from here, which the
bootstrap answers; a bootstrap that hears none fences itself, and this end gives the
host up when its pings go unanswered.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gcurun.launch.api import (
    Binding,
    Event,
    ExecutorErrorEvent,
    ExitEvent,
    OutputEvent,
    RankSpec,
    shared_environment,
)
from gcurun.launch.remote.protocol import ERROR, EXIT, STARTED, STOPPED, STREAM_KINDS, FrameReader
from gcurun.rendezvous.wire import encode_frame

# After asking a bootstrap to stop its ranks, its exits are awaited for the grace period
# plus this long before the channel is cut (which makes it SIGKILL them).
TERMINATE_SLACK = 5.0
# The job travels in messages of about this size (or this many ranks), far below the
# wire's frame limit; a stop waits at most for one of them to be written.
BATCH_BYTES = 256 * 1024
BATCH_RANKS = 512
SEND_WAIT_SECONDS = 5.0   # a message waits this long for the one being written
PING_SECONDS = 1.0        # between two pings to a bootstrap that fences itself
FENCE_SLACK = 5.0         # a bootstrap fences itself after the liveness timeout plus this


def binding_message(binding: Binding | None) -> dict[str, Any] | None:
    if binding is None:
        return None
    return {"cpus": list(binding.cpus), "numa_node": binding.numa_node,
            "mem_bind": binding.mem_bind}


def job_messages(ranks: Sequence[RankSpec], argv: Mapping[int, Sequence[str]], *,
                 workdir: str, kill_grace: float, secrets: Mapping[str, str],
                 fence_after: float | None = None,
                 forwarded: Mapping[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """The messages that give a bootstrap its job: one ``job`` (working directory, the
    launcher's ``forwarded`` environment when there is one, the environment every rank
    shares, the secrets, the first ranks, and ``fence_after`` when the launcher pings),
    then ``ranks`` messages with the rest; ``more`` tells whether another follows."""
    shared = shared_environment(r.env for r in ranks)
    head: dict[str, Any] = {"op": "job", "workdir": workdir, "kill_grace": kill_grace,
                            "secrets": dict(secrets), "env": shared}
    if forwarded:
        head["forwarded"] = dict(forwarded)
    if fence_after is not None:
        head["fence_after"] = fence_after
    batch: list[dict[str, Any]] = []
    size = 0
    for r in ranks:
        entry = {"rank": r.rank, "argv": list(argv.get(r.rank, r.argv)),
                 "env": {n: v for n, v in r.env.items() if shared.get(n) != v},
                 "binding": binding_message(r.binding)}
        batch.append(entry)
        size += len(json.dumps(entry))
        if size >= BATCH_BYTES or len(batch) >= BATCH_RANKS:
            yield {**head, "ranks": batch, "more": True}
            head, batch, size = {"op": "ranks"}, [], 0
    yield {**head, "ranks": batch, "more": False}


class BootstrapGroup:
    """The ranks one bootstrap runs, seen from the launcher (a :class:`RankGroup`).

    Subclasses give the channel: :meth:`_open` (make it ready, at start), :meth:`_send`,
    :meth:`_recv` (b"" at its end), :meth:`_close` (drop it: the bootstrap stops its
    ranks) and :meth:`_lost_reason` (why it ended without reporting some ranks).
    """

    host = "localhost"

    def __init__(self, ranks: Sequence[RankSpec], *, workdir: str,
                 secrets: Mapping[str, str] | None = None, kill_grace: float = 10.0,
                 forwarded: Mapping[str, str] | None = None) -> None:
        self._ranks = list(ranks)
        self._workdir = workdir
        self._secrets = dict(secrets or {})
        self._forwarded = dict(forwarded or {})
        self._kill_grace = kill_grace
        self._pids: dict[int, int] = {}
        self._done: set[int] = set()          # ranks reported (exited or lost)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._terminating = False
        self._all_sent = False
        self._error: str | None = None
        self._fence_after: float | None = None
        self._liveness: float | None = None   # seconds of silence that lose the channel
        self._listening_since: float | None = None   # the reader waits for bytes since
        self._unanswered_since: float | None = None  # the first ping not answered yet
        self.leftover = b""                   # frames that came with the hello line

    # -- the RankGroup protocol -------------------------------------------------------------
    def start(self, events: queue.Queue[Event]) -> None:
        """Send the job and relay the bootstrap's frames to ``events`` from now on; the job
        is sent by a thread of its own, so a stop is obeyed however large it is."""
        with self._lock:
            if self._reader is not None or self._terminating:
                return
            try:
                self._open()
                self._reader = threading.Thread(target=self._read, args=(events,),
                                                daemon=True, name=f"bootstrap-{self.host}")
                self._reader.start()
                threading.Thread(target=self._feed, daemon=True,
                                 name=f"bootstrap-{self.host}-job").start()
                if self._fence_after is not None:
                    threading.Thread(target=self._ping, args=(self._reader,), daemon=True,
                                     name=f"bootstrap-{self.host}-ping").start()
            except BaseException:
                self._close()
                raise

    def keep_alive(self, liveness: float) -> None:
        """Before :meth:`start`: ping the bootstrap every second, and have it fence itself
        (stop its ranks and exit) after ``liveness`` + FENCE_SLACK seconds without a word
        from this launcher. The bootstrap answers each ping; when none is answered for
        ``liveness`` seconds while this end waits for its bytes, the channel is closed and
        its ranks reported lost ("no word from HOST"). Subclasses also make the kernel
        report the channel broken a little later (:meth:`_watch_liveness`)."""
        self._liveness = liveness
        self._fence_after = liveness + FENCE_SLACK
        # The kernel's deadline is the backstop of the pings' (which name the cause).
        self._watch_liveness(liveness + FENCE_SLACK)

    def terminate(self, grace_seconds: float) -> None:
        with self._lock:
            first, self._terminating = not self._terminating, True
            reader = self._reader
        if reader is None:
            self._close()  # never started: the bootstrap exits having run nothing
            return
        if first and reader.is_alive():
            self._send_message({"op": "terminate", "grace": grace_seconds})
        reader.join(grace_seconds + TERMINATE_SLACK)
        if reader.is_alive():
            self._close()
            reader.join(TERMINATE_SLACK)
        if reader.is_alive():
            self._abandon()
            reader.join(TERMINATE_SLACK)

    def pids(self) -> dict[int, int]:
        with self._lock:
            return dict(self._pids)

    def job_messages(self) -> Iterator[dict[str, Any]]:
        """What the bootstrap is told: everything about the ranks, nothing on argv."""
        return job_messages(self._ranks, self._argv(), workdir=self._workdir,
                            kill_grace=self._kill_grace, secrets=self._secrets,
                            fence_after=self._fence_after, forwarded=self._forwarded)

    # -- for subclasses ---------------------------------------------------------------------
    def _open(self) -> None:
        """Make the channel ready (the bootstrap has said hello)."""

    def _send(self, data: bytes) -> None:
        raise NotImplementedError

    def _recv(self) -> bytes:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError

    def _watch_liveness(self, liveness: float) -> None:
        """Make the channel's socket fail after ``liveness`` seconds of silence."""

    def _abandon(self) -> None:
        """The bootstrap did not go when its channel closed: end it the hard way."""

    def _lost_reason(self) -> str:
        raise NotImplementedError

    def _argv(self) -> Mapping[int, Sequence[str]]:
        """The argv each rank is started with, where it differs from the plan's."""
        return {}

    def _after_frames(self) -> None:
        """Called after each chunk of frames (SSH keeps the bootstrap's stderr)."""

    # -- the job and the frames -------------------------------------------------------------
    def _send_message(self, message: Mapping[str, Any]) -> bool:
        """Send one message whole; False when the channel is gone or stuck."""
        if not self._send_lock.acquire(timeout=SEND_WAIT_SECONDS):
            return False
        try:
            self._send(encode_frame(dict(message)))
            return True
        except (OSError, EOFError):
            return False
        finally:
            self._send_lock.release()

    def _feed(self) -> None:
        for message in self.job_messages():
            if self._terminating:
                return
            if not self._send_message(message):
                self._error = self._error or \
                    f"lost the connection to gcurun's bootstrap on {self.host} while " \
                    "sending the job"
                return
        self._all_sent = True

    def _ping(self, reader: threading.Thread) -> None:
        """Say "still here" every PING_SECONDS while the bootstrap's frames come; give the
        channel up when the bootstrap has not answered for the liveness timeout. Only
        time this end spent waiting for bytes counts: a launcher too busy to read (a
        blocked console) loses no host."""
        while reader.is_alive():
            reader.join(PING_SECONDS)
            if not reader.is_alive():
                return
            if self._unheard_for() > (self._liveness or float("inf")):
                self._error = self._error or (
                    f"no word from {self.host} for {self._liveness:g} s (--liveness-timeout): "
                    "its link is cut, or it is down or stopped")
                self._close()   # the reader sees the end and reports the ranks lost
                return
            if self._send_message({"op": "ping"}) and self._unanswered_since is None:
                self._unanswered_since = time.monotonic()

    def _unheard_for(self) -> float:
        """How long pings have gone unanswered while the reader waited for bytes."""
        since, asked = self._listening_since, self._unanswered_since
        if since is None or asked is None:
            return 0.0
        return time.monotonic() - max(since, asked)

    def _read(self, events: queue.Queue[Event]) -> None:
        frames = FrameReader()
        data = self.leftover
        try:
            while True:
                for kind, rank, payload in frames.feed(data):
                    self._on_frame(kind, rank, payload, events)
                self._after_frames()
                self._listening_since = time.monotonic()
                data = self._recv()
                self._listening_since = self._unanswered_since = None   # heard
                if not data:
                    break
        except (OSError, EOFError) as exc:
            self._error = self._error or f"lost the connection to {self.host}: {exc}"
        self._after_frames()
        lost = tuple(r.rank for r in self._ranks if r.rank not in self._done)
        if lost:
            reason = self._lost_reason() if self._all_sent or not self._terminating else \
                "not started: the job was stopped first"
            events.put(ExecutorErrorEvent(lost, reason))
        self._close()

    def _on_frame(self, kind: int, rank: int, payload: bytes,
                  events: queue.Queue[Event]) -> None:
        if kind in STREAM_KINDS:
            events.put(OutputEvent(rank, STREAM_KINDS[kind], payload))  # type: ignore[arg-type]
        elif kind == STARTED:
            with self._lock:
                self._pids[rank] = int(payload)
        elif kind == EXIT:
            result = json.loads(payload)
            self._done.add(rank)
            events.put(ExitEvent(rank, result.get("exit_code"), result.get("signal"),
                                 result.get("error_text")))
        elif kind == ERROR:
            self._error = payload.decode(errors="replace")
        elif kind == STOPPED:
            stopped = tuple(r.rank for r in self._ranks if r.rank not in self._done)
            self._done.update(stopped)
            signal_name = payload.decode(errors="replace")
            events.put(ExecutorErrorEvent(stopped, (
                f"gcurun's bootstrap on {self.host} received {signal_name} and stopped "
                "its ranks")))
