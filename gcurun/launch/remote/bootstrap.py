"""The remote side of the SSH executor: ``python -m gcurun.launch.remote.bootstrap``.

One bootstrap runs per remote host and job, started over one SSH channel. It speaks on
that channel only, so nothing of a rank's environment or any secret ever appears on a
command line:

1. It writes a hello line (``GCURUN-BOOTSTRAP {json}``) with its gcurun version, host name
   and interpreter, then waits. The launcher checks every host this way before any rank
   starts; closing the channel now makes the bootstrap exit having started nothing.
2. It reads the job from stdin: one ``job`` message (:mod:`.protocol`) with the working
   directory, each rank's argv, environment and binding, and the secret variables.
3. It starts each rank in its own session (its own process group), with stdin from
   /dev/null, and relays its stdout and stderr as frames on its own stdout, then the exit
   code or signal. A rank's exit frame follows all of its output.
4. A ``terminate`` message stops every rank (SIGTERM to its group, a grace period, SIGKILL).
   The end of stdin means the launcher or its connection is gone: every rank's group is
   stopped the same way, so no rank outlives a dead launcher.

Stdlib only (with gcurun's stdlib-only modules): it runs on hosts where nothing but the
interpreter and gcurun can be assumed.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from gcurun.launch.remote.mpi_guard import death_signal_setter, signal_group
from gcurun.launch.remote.protocol import (
    ERROR,
    EXIT,
    STARTED,
    STDERR,
    STDOUT,
    MessageReader,
    hello_line,
    pack_frame,
)
from gcurun.rendezvous.wire import WireError

# After a rank exits, output still held in its pipes by a grandchild is awaited this long.
PIPE_DRAIN_SECONDS = 2.0
DEFAULT_KILL_GRACE = 3.0
POLL_SECONDS = 0.05


def merged_environment(base: Mapping[str, str], rank_env: Mapping[str, str],
                       secrets: Mapping[str, str]) -> dict[str, str]:
    """A rank's environment: the login (or launcher's) environment, then the rank's
    variables, then the secrets."""
    return {**base, **rank_env, **secrets}


def binding_argv(argv: Sequence[str], binding: Mapping[str, Any] | None,
                 which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """``argv`` under ``numactl --membind`` when the binding asks for memory binding to a
    NUMA node and numactl exists on this host; else ``argv`` itself."""
    if binding and binding.get("mem_bind") and binding.get("numa_node") is not None:
        numactl = which("numactl")
        if numactl:
            return [numactl, f"--membind={binding['numa_node']}", "--", *argv]
    return list(argv)


def child_setup(cpus: Sequence[int] | None) -> Callable[[], None]:
    """What a rank's child process does before exec: die with the bootstrap (so even a
    killed bootstrap leaves no rank behind) and take its CPUs."""
    die_with_parent = death_signal_setter(signal.SIGKILL)

    def setup() -> None:
        die_with_parent()
        if cpus:
            os.sched_setaffinity(0, cpus)

    return setup


class Rank:
    """One running rank: its process, the pipes still open and when it exited."""

    def __init__(self, rank: int, proc: subprocess.Popen[bytes]) -> None:
        self.rank = rank
        self.proc = proc
        self.pipes: dict[int, int] = {}    # fd -> frame kind
        self.exited_at: float | None = None
        self.reported = False
        self.pidfd: int | None = None


class Bootstrap:
    """The event loop of one bootstrap; ``run`` returns the process exit code."""

    def __init__(self, stdin_fd: int = 0, stdout_fd: int = 1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd
        self.clock = clock
        self.selector = selectors.DefaultSelector()
        self.ranks: dict[int, Rank] = {}
        self.channel_open = True
        self.kill_grace = DEFAULT_KILL_GRACE
        self.kill_at: float | None = None
        self.killed = False
        self.messages = MessageReader()
        self.hostname = socket.gethostname()

    # -- the channel --------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        """Write to the launcher; once the channel is gone, stop the ranks instead."""
        view = memoryview(data)
        while self.channel_open and view:
            try:
                view = view[os.write(self.stdout_fd, view):]
            except InterruptedError:
                continue
            except OSError:
                self.lose_channel()

    def lose_channel(self) -> None:
        if self.channel_open:
            self.channel_open = False
            self.stop(self.kill_grace)

    def read_job(self) -> dict[str, Any] | None:
        """Block until the job message arrives; None when the channel closes first."""
        while True:
            data = os.read(self.stdin_fd, 65536)
            if not data:
                return None
            for message in self.messages.feed(data):
                if message["op"] == "job":
                    return message
                self.obey(iter([message]))   # a terminate before the job: run nothing
                if self.kill_at is not None:
                    return None

    # -- ranks --------------------------------------------------------------------------
    def start(self, job: Mapping[str, Any]) -> bool:
        """Start every rank of ``job``; False (after an ERROR frame) when none can run."""
        self.kill_grace = float(job.get("kill_grace", DEFAULT_KILL_GRACE))
        workdir = job.get("workdir")
        if workdir:
            try:
                os.chdir(workdir)
            except OSError as exc:
                self.send(pack_frame(ERROR, -1, (
                    f"cannot change to working directory '{workdir}' on {self.hostname}: "
                    f"{exc.strerror}; create it there or pass another --workdir").encode()))
                return False
        secrets = job.get("secrets", {})
        for spec in job["ranks"]:
            self.spawn(spec, merged_environment(os.environ, spec["env"], secrets))
        return True

    def spawn(self, spec: Mapping[str, Any], env: dict[str, str]) -> None:
        rank, binding = int(spec["rank"]), spec.get("binding")
        argv = binding_argv(spec["argv"], binding)
        try:
            proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True,
                preexec_fn=child_setup((binding or {}).get("cpus")))
        except (OSError, subprocess.SubprocessError) as exc:
            code, why = spawn_failure(argv[0], exc, env.get("PATH", ""), self.hostname)
            self.send(pack_frame(EXIT, rank, json.dumps(
                {"exit_code": code, "signal": None, "error_text": why}).encode()))
            return
        r = self.ranks[rank] = Rank(rank, proc)
        self.send(pack_frame(STARTED, rank, str(proc.pid).encode()))
        for pipe, kind in ((proc.stdout, STDOUT), (proc.stderr, STDERR)):
            assert pipe is not None
            fd = pipe.fileno()
            os.set_blocking(fd, False)
            r.pipes[fd] = kind
            self.selector.register(fd, selectors.EVENT_READ, ("pipe", r))
        try:
            r.pidfd = os.pidfd_open(proc.pid)
            self.selector.register(r.pidfd, selectors.EVENT_READ, ("exit", r))
        except (AttributeError, OSError):
            r.pidfd = None  # polled instead
        if self.kill_at is not None:  # a terminate raced with the start
            signal_group(proc.pid, signal.SIGTERM)

    def stop(self, grace: float) -> None:
        """SIGTERM every rank's group now, SIGKILL whatever lives after ``grace``."""
        if self.kill_at is not None:
            return
        self.kill_at = self.clock() + grace
        for r in self.ranks.values():
            if r.exited_at is None:
                signal_group(r.proc.pid, signal.SIGTERM)

    # -- the loop -----------------------------------------------------------------------
    def run(self, job: Mapping[str, Any]) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        signal.set_wakeup_fd(wake_w)
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(signum, lambda *_: None)
        self.selector.register(wake_r, selectors.EVENT_READ, ("signal", None))
        self.selector.register(self.stdin_fd, selectors.EVENT_READ, ("control", None))
        if not self.start(job):
            return 1
        self.obey(self.messages.feed(b""))  # a terminate that came with the job
        while any(not r.reported for r in self.ranks.values()):
            for key, _ in self.selector.select(self.timeout()):
                what, r = key.data
                if what == "pipe":
                    self.relay(r, key.fd)
                elif what == "exit":
                    self.reap(r)
                elif what == "control":
                    self.control()
                else:
                    drain(wake_r)
                    self.stop(self.kill_grace)
            self.tick()
        for r in self.ranks.values():   # strays left in a finished rank's group
            signal_group(r.proc.pid, signal.SIGKILL)
        return 0

    def timeout(self) -> float:
        deadlines = [r.exited_at + PIPE_DRAIN_SECONDS for r in self.ranks.values()
                     if r.exited_at is not None and not r.reported]
        if self.kill_at is not None and not self.killed:
            deadlines.append(self.kill_at)
        wait = min(deadlines) - self.clock() if deadlines else 1.0
        if any(r.pidfd is None and r.exited_at is None for r in self.ranks.values()):
            wait = min(wait, POLL_SECONDS)
        return max(0.0, wait)

    def tick(self) -> None:
        now = self.clock()
        if self.kill_at is not None and now >= self.kill_at and not self.killed:
            self.killed = True
            for r in self.ranks.values():
                signal_group(r.proc.pid, signal.SIGKILL)
        for r in self.ranks.values():
            if r.exited_at is None and r.pidfd is None:
                self.reap(r)
            if r.exited_at is not None and not r.reported and (
                    not r.pipes or now >= r.exited_at + PIPE_DRAIN_SECONDS):
                self.report(r)

    def relay(self, r: Rank, fd: int) -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.send(pack_frame(r.pipes[fd], r.rank, data))
        else:
            self.close_pipe(r, fd)

    def close_pipe(self, r: Rank, fd: int) -> None:
        kind = r.pipes.pop(fd)
        self.selector.unregister(fd)
        os.close(fd)
        self.send(pack_frame(kind, r.rank))  # empty: the stream ended

    def reap(self, r: Rank) -> None:
        if r.proc.poll() is None:
            return
        r.exited_at = self.clock()
        if r.pidfd is not None:
            self.selector.unregister(r.pidfd)
            os.close(r.pidfd)
            r.pidfd = None

    def report(self, r: Rank) -> None:
        for fd in list(r.pipes):
            self.close_pipe(r, fd)
        code = r.proc.returncode
        result = {"exit_code": None, "signal": -code} if code < 0 else \
            {"exit_code": code, "signal": None}
        self.send(pack_frame(EXIT, r.rank, json.dumps(result).encode()))
        r.reported = True

    def control(self) -> None:
        try:
            data = os.read(self.stdin_fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.selector.unregister(self.stdin_fd)
            self.lose_channel()
            return
        self.obey(self.messages.feed(data))

    def obey(self, messages: Iterator[dict[str, Any]]) -> None:
        for message in messages:
            if message.get("op") == "terminate":
                self.stop(float(message.get("grace", self.kill_grace)))


def drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except OSError:
        pass


def spawn_failure(program: str, exc: BaseException, path: str, host: str) -> tuple[int, str]:
    """Exit code and message for a rank that could not be started (127 / 126, as a
    shell would say)."""
    if isinstance(exc, FileNotFoundError):
        return 127, (f"cannot run '{program}' on {host}: no such program on PATH "
                     f"({path}); install it there or give its full path")
    if isinstance(exc, PermissionError):
        return 126, f"cannot run '{program}' on {host}: permission denied"
    if isinstance(exc, subprocess.SubprocessError):
        return 1, f"cannot apply the CPU binding on {host} before running '{program}': {exc}"
    return 1, f"cannot run '{program}' on {host}: {exc}"


def main() -> int:
    from gcurun import __version__

    boot = Bootstrap()
    try:
        boot.send(hello_line(__version__))
        job = boot.read_job()
    except (OSError, WireError):
        return 1
    if job is None:
        return 0   # the launcher closed the channel after its checks: nothing to run
    return boot.run(job)


if __name__ == "__main__":
    sys.exit(main())
