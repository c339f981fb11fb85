"""The remote side of the SSH executor: ``python -m gcurun.launch.remote.bootstrap``.

One bootstrap runs per remote host and job, started over one SSH channel. It speaks on
that channel only, so nothing of a rank's environment or any secret ever appears on a
command line:

1. It writes a hello line (``GCURUN-BOOTSTRAP {json}``) with its gcurun version, host name
   and interpreter, then waits. The launcher checks every host this way before any rank
   starts; closing the channel now makes the bootstrap exit having started nothing.
2. It reads the job from stdin: one ``job`` message (:mod:`.protocol`) with the working
   directory, the launcher's forwarded environment, the environment all its ranks
   share, the secret variables and the first ranks (argv, environment and binding of
   each); ``ranks`` messages bring the rest, so a job of any size travels in messages
   of bounded size.
3. It starts each rank in its own session (its own process group), with stdin from
   /dev/null, and relays its stdout and stderr as frames on its own stdout, then the exit
   code or signal. A rank's exit frame follows all of its output. Ranks are started a few
   at a time between turns of the event loop, so a stop is obeyed at once even while
   thousands of ranks are still to start.
4. A ``terminate`` message stops every rank (SIGTERM to its group, a grace period, SIGKILL)
   and starts no more. The end of stdin means the launcher or its connection is gone:
   every rank's group is stopped the same way, so no rank outlives a dead launcher. A
   signal to the bootstrap itself (SIGTERM, SIGINT, SIGHUP) stops them too, after a
   ``stopped`` frame that tells the launcher why. A cut link delivers no end of stdin:
   when the job gives ``fence_after`` (seconds; the SSH launcher always does), the
   launcher pings every second and a bootstrap that has heard nothing for that long
   (also while its output waits for a slow reader) *fences itself*: it stops every rank
   the same way and exits, so no rank outlives a host's lost link.
5. A guard process, forked before the first rank starts, learns each rank's process
   group; if the bootstrap dies without saying it is done (SIGKILL), the guard stops
   those groups, so even the ranks' own children do not outlive it. (The ranks
   themselves get SIGKILL from the kernel when the bootstrap dies: PR_SET_PDEATHSIG.)
6. When a rank exits, what is left of its process group (forked DataLoader workers,
   helpers) is killed at once: it would hold the rank's sockets and pipes open, so its
   peers and the launcher would not see the rank go.

The launcher runs its own host's ranks under a bootstrap too, over pipes.

Stdlib only (with gcurun's stdlib-only modules): it runs on hosts where nothing but the
interpreter and gcurun can be assumed.
"""

from __future__ import annotations

import collections
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from gcurun.launch.remote.guard import Guard
from gcurun.launch.remote.protocol import (
    ERROR,
    EXIT,
    PONG,
    STARTED,
    STDERR,
    STDOUT,
    STOPPED,
    MessageReader,
    hello_line,
    pack_frame,
)
from gcurun.launch.remote.session_guard import group_exists, signal_group
from gcurun.launch.remote.spawning import (
    binding_argv,
    child_setup,
    merged_environment,
    spawn_failure,
)
from gcurun.rendezvous.wire import WireError

# After a rank exits, output still held in its pipes by a grandchild is awaited this long.
PIPE_DRAIN_SECONDS = 2.0
DEFAULT_KILL_GRACE = 3.0
# Ranks are started for at most this long before the loop looks at its channel and signals.
SPAWN_SLICE_SECONDS = 0.02
FENCED_EXIT_CODE = 3      # the bootstrap's own status after it fenced itself


class Rank:
    """One running rank: its process, the pipes still open and when it exited."""

    def __init__(self, rank: int, proc: subprocess.Popen[bytes]) -> None:
        self.rank = rank
        self.proc = proc
        self.pipes: dict[int, int] = {}    # fd -> frame kind
        self.exited_at: float | None = None
        self.reported = False


class Bootstrap:
    """The event loop of one bootstrap; ``run`` returns the process exit code."""

    def __init__(self, stdin_fd: int = 0, stdout_fd: int = 1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd
        self.clock = clock
        self.selector = selectors.DefaultSelector()
        self.ranks: dict[int, Rank] = {}
        self.by_pid: dict[int, Rank] = {}
        self.running: set[Rank] = set()      # started, not exited
        self.draining: set[Rank] = set()     # exited, not reported yet
        self.to_start: collections.deque[Mapping[str, Any]] = collections.deque()
        self.more = False            # the launcher has more ranks to send
        self.shared_env: Mapping[str, str] = {}
        self.forwarded_env: Mapping[str, str] = {}
        self.secrets: Mapping[str, str] = {}
        self.channel_open = True
        self.kill_grace = DEFAULT_KILL_GRACE
        self.kill_at: float | None = None
        self.killed = False
        self.guard: Guard | None = None
        self.messages = MessageReader()
        self.hostname = socket.gethostname()
        self.fence_after: float | None = None   # seconds of silence that fence this host
        self.heard_at = clock()                 # the launcher's last message
        self.fenced = False
        self.listening = True                   # stdin is open (no end seen yet)
        self.pong_owed = False                  # a ping came; the loop answers it

    # -- the channel --------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        """Write to the launcher; once the channel is gone, stop the ranks instead.
        With ``fence_after``, a write that cannot progress waits while the launcher's
        pings still come (a console that reads slowly is no lost link), and fences the
        host once none came for that long (a cut link fills every buffer on the way and
        then blocks forever)."""
        view = memoryview(data)
        while self.channel_open and view:
            try:
                view = view[os.write(self.stdout_fd, view):]
            except (InterruptedError, BlockingIOError):
                if self.fence_after is not None:
                    self.await_writable(self.fence_after)
            except OSError:
                self.lose_channel()

    def await_writable(self, fence_after: float) -> None:
        """Until the channel takes bytes again, obey what the launcher says; fence when
        it has said nothing for ``fence_after`` seconds."""
        while self.channel_open:
            left = self.heard_at + fence_after - self.clock()
            if left <= 0:
                self.fence()
                return
            readers = (self.stdin_fd,) if self.listening else ()
            ready = ready_fds(readers, self.stdout_fd, left)
            if self.stdout_fd in ready:
                return
            if self.stdin_fd in ready:
                self.control()

    def fence(self) -> None:
        """The launcher is unreachable: stop every rank, send nothing more, exit.
        Nothing is written, not even to stderr: the channel is what is stuck."""
        if self.fenced:
            return
        self.fenced = True
        self.channel_open = False
        self.stop(self.kill_grace)

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
        """Take the job; False (after an ERROR frame) when none of its ranks can run."""
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
        self.secrets = job.get("secrets", {})
        self.shared_env = job.get("env", {})
        self.forwarded_env = job.get("forwarded", {})
        if job.get("fence_after") is not None:
            self.fence_after = float(job["fence_after"])
            self.heard_at = self.clock()
            os.set_blocking(self.stdout_fd, False)
        self.take(job)
        return True

    def take(self, message: Mapping[str, Any]) -> None:
        """Queue the ranks of a ``job`` or ``ranks`` message (none once stopping)."""
        if self.kill_at is not None:
            return
        self.to_start.extend(message.get("ranks", ()))
        self.more = bool(message.get("more", False))

    def start_some(self) -> None:
        """Start queued ranks for one slice of time."""
        until = self.clock() + SPAWN_SLICE_SECONDS
        while self.to_start and self.kill_at is None and self.clock() < until:
            spec = self.to_start.popleft()
            self.spawn(spec, merged_environment(os.environ, spec["env"], self.secrets,
                                                self.shared_env, self.forwarded_env))

    def spawn(self, spec: Mapping[str, Any], env: dict[str, str]) -> None:
        rank, binding = int(spec["rank"]), spec.get("binding")
        argv = binding_argv(spec["argv"], binding)
        try:
            proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True,
                preexec_fn=child_setup((binding or {}).get("cpus")))
        except Exception as exc:   # noqa: BLE001 - any failure is this rank's, reported
            code, why = spawn_failure(argv[0], exc, env.get("PATH", ""), self.hostname)
            self.send(pack_frame(EXIT, rank, json.dumps(
                {"exit_code": code, "signal": None, "error_text": why}).encode()))
            return
        if self.guard is not None:
            self.guard.tell(str(proc.pid))
        r = self.ranks[rank] = self.by_pid[proc.pid] = Rank(rank, proc)
        self.running.add(r)
        self.send(pack_frame(STARTED, rank, str(proc.pid).encode()))
        for pipe, kind in ((proc.stdout, STDOUT), (proc.stderr, STDERR)):
            assert pipe is not None
            fd = pipe.fileno()
            os.set_blocking(fd, False)
            r.pipes[fd] = kind
            self.selector.register(fd, selectors.EVENT_READ, ("pipe", r))
        if self.kill_at is not None:  # a stop raced with the start
            signal_group(proc.pid, signal.SIGTERM)

    def stop(self, grace: float) -> None:
        """SIGTERM every rank's group now, SIGKILL whatever lives after ``grace`` (a later
        stop may shorten that), and start no more ranks."""
        deadline = self.clock() + grace
        if self.kill_at is not None:
            self.kill_at = min(self.kill_at, deadline)
            return
        self.kill_at = deadline
        self.to_start.clear()
        self.more = False
        for r in self.running:
            signal_group(r.proc.pid, signal.SIGTERM)

    # -- the loop -----------------------------------------------------------------------
    def run(self, job: Mapping[str, Any]) -> int:
        try:
            self.guard = Guard(float(job.get("kill_grace", DEFAULT_KILL_GRACE)))
        except OSError:
            self.guard = None   # no process left for it: the ranks still die with us
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        signal.set_wakeup_fd(wake_w)
        # Handlers only wake the loop (the wakeup fd carries the signal's number); the
        # loop acts, so no frame is ever written from inside a handler.
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGCHLD):
            signal.signal(signum, lambda *_: None)
        self.selector.register(wake_r, selectors.EVENT_READ, ("signal", None))
        self.selector.register(self.stdin_fd, selectors.EVENT_READ, ("control", None))
        if not self.start(job):
            if self.guard is not None:
                self.guard.done()
            return 1
        self.obey(self.messages.feed(b""))  # what came with the job
        while self.to_start or self.more or self.running or self.draining:
            self.start_some()
            for key, _ in self.selector.select(0 if self.to_start else self.timeout()):
                what, r = key.data
                if what == "pipe":
                    self.relay(r, key.fd)
                elif what == "control":
                    self.control()
                else:
                    for number in drain(wake_r):
                        if number != signal.SIGCHLD:
                            self.on_signal(number)
            self.reap_exited()
            self.answer_ping()
            self.tick()
        for r in self.ranks.values():   # strays left in a finished rank's group
            signal_group(r.proc.pid, signal.SIGKILL)
        if self.guard is not None:
            self.guard.done()
        return FENCED_EXIT_CODE if self.fenced else 0

    def answer_ping(self) -> None:
        """Answer the pings that came since the last turn, with one ``PONG`` (from the
        loop only: a ping read while a write waits must not write in turn)."""
        if self.pong_owed:
            self.pong_owed = False
            self.send(pack_frame(PONG, -1))

    def on_signal(self, signum: int) -> None:
        """The bootstrap itself was told to stop: say so, then stop every rank."""
        if self.kill_at is None:
            self.send(pack_frame(STOPPED, -1, signal.Signals(signum).name.encode()))
        self.stop(self.kill_grace)

    def timeout(self) -> float:
        deadlines = [r.exited_at + PIPE_DRAIN_SECONDS for r in self.draining
                     if r.exited_at is not None]
        if self.kill_at is not None and not self.killed:
            deadlines.append(self.kill_at)
        wait = min(deadlines) - self.clock() if deadlines else 1.0
        return max(0.0, min(wait, 1.0))   # 1 s at most: a lost SIGCHLD costs no more

    def tick(self) -> None:
        now = self.clock()
        if self.fence_after is not None and now - self.heard_at > self.fence_after:
            self.fence()   # heard nothing from the launcher for fence_after seconds
        if self.kill_at is not None and now >= self.kill_at and not self.killed:
            self.killed = True
            for r in self.ranks.values():
                signal_group(r.proc.pid, signal.SIGKILL)
        for r in list(self.draining):
            if not r.pipes or (r.exited_at is not None and
                               now >= r.exited_at + PIPE_DRAIN_SECONDS):
                self.report(r)

    def reap_exited(self) -> None:
        """Collect every rank that has exited (one system call when none has)."""
        while self.running:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == 0:
                return
            r = self.by_pid.get(info.si_pid)
            if r is None:    # not a rank (the guard, gone early): reap it and go on
                os.waitpid(info.si_pid, 0)
                continue
            r.proc.wait()
            signal_group(r.proc.pid, signal.SIGKILL)   # its forked children go with it
            r.exited_at = self.clock()
            self.running.discard(r)
            self.draining.add(r)

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

    def report(self, r: Rank) -> None:
        for fd in list(r.pipes):
            self.close_pipe(r, fd)
        code = r.proc.returncode
        result = {"exit_code": None, "signal": -code} if code < 0 else \
            {"exit_code": code, "signal": None}
        self.send(pack_frame(EXIT, r.rank, json.dumps(result).encode()))
        r.reported = True
        self.draining.discard(r)
        if self.guard is not None and not group_exists(r.proc.pid):
            self.guard.tell(f"-{r.proc.pid}")

    def control(self) -> None:
        try:
            data = os.read(self.stdin_fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.selector.unregister(self.stdin_fd)
            self.listening = False
            self.lose_channel()
            return
        self.heard_at = self.clock()
        self.obey(self.messages.feed(data))

    def obey(self, messages: Iterator[dict[str, Any]]) -> None:
        for message in messages:
            if message.get("op") == "terminate":
                self.stop(float(message.get("grace", self.kill_grace)))
            elif message.get("op") == "ranks":
                self.take(message)
            elif message.get("op") == "ping" and self.fence_after is not None:
                self.pong_owed = True   # heard_at is renewed; the launcher hears us back


def ready_fds(readers: tuple[int, ...], writer: int, seconds: float) -> set[int]:
    """Which of ``readers`` have bytes to read and whether ``writer`` can take bytes,
    within ``seconds`` (an empty set when none is ready by then)."""
    with selectors.DefaultSelector() as sel:
        sel.register(writer, selectors.EVENT_WRITE)
        for fd in readers:
            sel.register(fd, selectors.EVENT_READ)
        return {key.fd for key, _ in sel.select(seconds)}


def drain(fd: int) -> bytes:
    """Everything ``fd`` holds now (the numbers of the signals that arrived)."""
    data = b""
    try:
        while chunk := os.read(fd, 512):
            data += chunk
    except OSError:
        pass
    return data


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
