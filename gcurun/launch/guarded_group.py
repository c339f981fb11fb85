"""The lifecycle of a rank group that one launcher program runs (mpirun, srun; the Ray
and Spark drivers to come), written once as torchelastic's ``PContext`` is.

The program runs as one child of gcurun, in a session of its own, under the session
guard (:mod:`gcurun.launch.remote.session_guard`): if gcurun dies, the guard stops the
program and sweeps its session. Two reader threads split the program's output into
per-rank events and its own lines (kept for the failure report, and reported to the
supervisor as :class:`~gcurun.launch.api.LauncherNoticeEvent`, which the CLI shows);
a waiter reports every rank's exit once the program ends. A kind fills in the parts
marked below: how a line names its rank, how the program is stopped, and how its status
and messages become the ranks' exits.
"""

from __future__ import annotations

import logging
import os
import queue
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import IO

from gcurun.errors import LaunchError
from gcurun.launch.api import Event, ExitEvent, LauncherNoticeEvent, OutputEvent, Stream
from gcurun.launch.supervision.stopping import stop_processes

# Output lines of the program itself kept for the failure report.
NOTICE_LINES = 40


class GuardedLauncherGroup:
    """Every rank of a plan, started by one launcher program (``argv``)."""

    label = "launcher"          # how the program's own lines are marked: [mpirun]

    def __init__(self, ranks: Sequence[int], argv: Sequence[str], env: Mapping[str, str], *,
                 workdir: str, grace_seconds: float) -> None:
        self._ranks = list(ranks)
        self._known = frozenset(self._ranks)
        self._argv = list(argv)
        self._env = dict(env)
        self._workdir = workdir
        self._grace = grace_seconds
        self._proc: subprocess.Popen[bytes] | None = None
        self._messages: list[str] = []
        self._lock = threading.Lock()
        self._stopping = False

    # -- the lifecycle ----------------------------------------------------------------
    def start(self, events: queue.Queue[Event]) -> None:
        """Start the program under the session guard. Raises LaunchError when it cannot
        run."""
        self._before_start()
        program = self._argv[0]
        if shutil.which(program, path=self._env.get("PATH")) is None:
            self._after_end()
            raise LaunchError(f"cannot run '{program}': not found on PATH; "
                              f"{self._install_hint()}")
        logging.getLogger(type(self).__module__).info("running %s", shlex.join(self._argv))
        try:
            proc = subprocess.Popen(under_session_guard(self._argv, self._grace),
                                    env=self._env, cwd=self._workdir,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            self._after_end()
            raise LaunchError(self._cannot_run(program, exc)) from exc
        with self._lock:
            self._proc = proc
        readers = [threading.Thread(target=self._pump, args=(pipe, name, events),
                                    daemon=True, name=f"{self.label}-{name}")
                   for pipe, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr"))]
        for t in readers:
            t.start()
        threading.Thread(target=self._wait, args=(proc, readers, events), daemon=True,
                         name=f"{self.label}-wait").start()

    def terminate(self, grace_seconds: float) -> None:
        """Stop the program the kind's way (:meth:`_stop`), then every process group
        left in its session on this host. Idempotent; safe before start."""
        with self._lock:
            proc, self._stopping = self._proc, True
        if proc is None:
            return
        if proc.poll() is None:
            self._stop(proc, grace_seconds)
        groups = session_groups(proc.pid)
        if proc.poll() is None:
            groups.add(proc.pid)
        if groups:
            stop_processes(sorted(groups), self._sweep_grace(proc, grace_seconds))

    def pids(self) -> dict[int, int]:
        """Every rank maps to the pid of the guard that runs the program: the one process
        gcurun owns (it leads the job's session)."""
        with self._lock:
            return {r: self._proc.pid for r in self._ranks} if self._proc else {}

    # -- the reader and waiter threads -------------------------------------------------
    def _pump(self, pipe: IO[bytes], stream: Stream, events: queue.Queue[Event]) -> None:
        try:
            for line in iter(pipe.readline, b""):
                rank, tagged, text = self._split_line(line, stream)
                if rank is not None and rank in self._known:
                    events.put(OutputEvent(rank, tagged, text))
                else:
                    self._launcher_line(text.decode("utf-8", "replace"), events)
        except (OSError, ValueError):
            pass
        finally:
            pipe.close()

    def _launcher_line(self, text: str, events: queue.Queue[Event]) -> None:
        """One line of the program's own: kept for the failure report, and reported
        unless it is no news (:meth:`_is_news`)."""
        with self._lock:
            self._messages.append(text)
            del self._messages[:-NOTICE_LINES * 4]
            stopping = self._stopping
        if self._is_news(text, stopping):
            events.put(LauncherNoticeEvent(self.label,
                                           text if text.endswith("\n") else text + "\n"))

    def _wait(self, proc: subprocess.Popen[bytes], readers: list[threading.Thread],
              events: queue.Queue[Event]) -> None:
        code = proc.wait()
        for t in readers:
            t.join()
        self._after_end()
        for rank in self._ranks:
            for stream in ("stdout", "stderr"):
                events.put(OutputEvent(rank, stream, b""))   # type: ignore[arg-type]
        with self._lock:
            text = "".join(self._messages)
        for event in self._exit_events(code, text):
            events.put(event)

    # -- what a kind fills in ---------------------------------------------------------
    def _split_line(self, line: bytes, stream: Stream) -> tuple[int | None, Stream, bytes]:
        """(rank, stream, text) of one output line; rank None for the program's own
        (``text`` is then the line as the user should see it)."""
        return None, stream, line

    def _stop(self, proc: subprocess.Popen[bytes], grace_seconds: float) -> None:
        """Ask the running program to stop its ranks."""

    def _sweep_grace(self, proc: subprocess.Popen[bytes], grace_seconds: float) -> float:
        """The grace of the final sweep of the program's session."""
        return grace_seconds

    def _is_news(self, text: str, stopping: bool) -> bool:
        """Whether a line of the program's own is worth showing."""
        return True

    def _exit_events(self, code: int, messages: str) -> list[ExitEvent]:
        """The ranks' exits from the program's status and its own messages."""
        raise NotImplementedError

    def _before_start(self) -> None:
        """Write what the program reads (a hostfile)."""

    def _after_end(self) -> None:
        """Remove what :meth:`_before_start` wrote."""

    def _install_hint(self) -> str:
        return f"install {self._argv[0]}"

    def _cannot_run(self, program: str, exc: OSError) -> str:
        return f"cannot run '{program}': {exc.strerror or exc}"


def under_session_guard(argv: Sequence[str], grace_seconds: float) -> list[str]:
    """``argv`` run under :mod:`gcurun.launch.remote.session_guard` (by file path, with
    this interpreter)."""
    from gcurun.launch.remote import session_guard

    return [sys.executable, os.path.abspath(session_guard.__file__), str(grace_seconds),
            "--", *argv]


def session_groups(sid: int) -> set[int]:
    """The process groups of the live processes in session ``sid`` (found as the guard
    finds them)."""
    from gcurun.launch.remote.session_guard import session_processes

    return {group for _, group in session_processes(sid)}
