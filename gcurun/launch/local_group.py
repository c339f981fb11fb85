"""The local executor: ranks as child processes of gcurun, each leading its own session."""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from gcurun.errors import LaunchError
from gcurun.launch.api import Event, ExitEvent, OutputEvent, RankGroup, RankSpec, Stream
from gcurun.launch.remote.bootstrap import PIPE_DRAIN_SECONDS, merged_environment
from gcurun.launch.supervision.stopping import stop_processes

if TYPE_CHECKING:
    from gcurun.launch.prepare import PreparedJob


def pump(pipe, rank: int, stream: Stream, events: queue.Queue[Event]) -> None:
    """Copy a pipe to ``events`` until its end, then mark the end with empty data."""
    fd = pipe.fileno()
    try:
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            events.put(OutputEvent(rank, stream, data))
    except OSError:
        pass
    finally:
        pipe.close()
        events.put(OutputEvent(rank, stream, b""))


def exit_event(rank: int, returncode: int) -> ExitEvent:
    if returncode < 0:
        return ExitEvent(rank, exit_code=None, signal=-returncode)
    return ExitEvent(rank, exit_code=returncode)


class LocalRankGroup:
    """Runs the ranks of a plan that live on this host.

    ``argv_for`` turns a rank into the argv actually started (binding wrappers go there);
    ``extra_env`` carries variables that must not appear in the plan, such as the job
    secret; ``base_env`` is what the ranks inherit (the launcher's environment).
    """

    def __init__(
        self,
        ranks: Sequence[RankSpec],
        *,
        workdir: str | None = None,
        base_env: Mapping[str, str] | None = None,
        extra_env: Mapping[str, str] | None = None,
        argv_for: Callable[[RankSpec], Sequence[str]] = lambda r: r.argv,
    ) -> None:
        self._ranks = list(ranks)
        self._workdir = workdir
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._extra_env = dict(extra_env or {})
        self._argv_for = argv_for
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def start(self, events: queue.Queue[Event]) -> None:
        """Start every rank. Raises LaunchError, with no rank left running, when one
        cannot be started (a missing program, a bad working directory)."""
        for spec in self._ranks:
            argv = list(self._argv_for(spec))
            env = merged_environment(self._base_env, spec.env, self._extra_env)
            try:
                proc = subprocess.Popen(
                    argv, env=env, cwd=self._workdir, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            except OSError as exc:
                self.terminate(0)
                raise LaunchError(self._start_error(spec, argv, env, exc)) from exc
            with self._lock:
                self._procs[spec.rank] = proc
            self._watch(spec.rank, proc, events)

    def terminate(self, grace_seconds: float) -> None:
        with self._lock:
            pids = [p.pid for p in self._procs.values()]
        if pids:
            stop_processes(pids, grace_seconds)

    def pids(self) -> dict[int, int]:
        with self._lock:
            return {rank: p.pid for rank, p in self._procs.items()}

    def _watch(self, rank: int, proc: subprocess.Popen[bytes], events: queue.Queue[Event]):
        readers = [
            threading.Thread(target=pump, args=(proc.stdout, rank, "stdout", events),
                             daemon=True, name=f"rank{rank}-stdout"),
            threading.Thread(target=pump, args=(proc.stderr, rank, "stderr", events),
                             daemon=True, name=f"rank{rank}-stderr"),
        ]
        for t in readers:
            t.start()

        def wait() -> None:
            # A rank that exited while a grandchild holds its pipes open is reported after
            # PIPE_DRAIN_SECONDS (as the bootstrap does); the grandchild's output streams on.
            code = proc.wait()
            for t in readers:
                t.join(PIPE_DRAIN_SECONDS)
            events.put(exit_event(rank, code))

        threading.Thread(target=wait, daemon=True, name=f"rank{rank}-wait").start()

    def _start_error(self, spec: RankSpec, argv: list[str], env: Mapping[str, str],
                     exc: OSError) -> str:
        program = argv[0]
        if isinstance(exc, FileNotFoundError) and self._workdir and \
                not os.path.isdir(self._workdir):
            return (f"working directory '{self._workdir}' does not exist; "
                    "create it or pass another --workdir")
        if isinstance(exc, FileNotFoundError) and shutil.which(program, path=env.get("PATH")) \
                is None:
            return (f"rank {spec.rank}: cannot run '{program}': no such program on PATH; "
                    "check the command's spelling or give its full path")
        return f"rank {spec.rank}: cannot run '{program}': {exc.strerror or exc}"


def local_groups(job: PreparedJob, secrets: Mapping[str, str]) -> list[RankGroup]:
    """The ranks of ``job`` that run on this host, in one group (none if there are none),
    each started under its binding."""
    from gcurun.launch.planning.binding import local_binder

    ranks = [r for r in job.plan.ranks if r.is_local]
    return [LocalRankGroup(ranks, workdir=job.plan.workdir, extra_env=secrets,
                           argv_for=local_binder())] if ranks else []
