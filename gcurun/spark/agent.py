"""The Spark task of an elastic job (``run_elastic``) or of an mpirun job (``run`` with
``use_mpi``): an agent that offers its task slot to the driver and runs what the driver
starts there: the workers of the elastic runner, or an MPI daemon
(:mod:`gcurun.spark._mpi`).

Each agent connects to the driver's agent service, proves it knows the job's secret,
says where it runs (its executor's host address and the executor, by the pid of its
JVM), and then obeys frames: ``start`` a worker (``python -m
gcurun.launch.remote.run_function`` with the environment the driver planned, over the
executor's own, or the command line the frame gives), ``stop`` it, ``done`` (the job
is over). It forwards each worker's stdout and stderr (``output`` frames, the bytes
after each) and then reports its exit. A worker runs in its own session and gets
SIGKILL when its agent's Python worker dies (the executor lost, the task killed): the
driver sees the agent's connection drop and re-forms the job without that executor.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from gcurun.launch.remote import run_function as rank_side
from gcurun.launch.remote.session_guard import death_signal_setter, signal_group
from gcurun.launch.remote.spawning import merged_environment
from gcurun.rendezvous import wire
from gcurun.spark._output import drain, open_channel, pump

MAGIC = b"GCUSA01\n"
LABEL = b"gcurun-spark-agent"
CONNECT_SECONDS = 30.0
SEND_SECONDS = 30.0
EXECUTOR_POLL_SECONDS = 0.2
READ_SECONDS = 60.0
# The kernel declares a connection to a vanished peer broken after this much silence.
LIVENESS_SECONDS = 30.0


@dataclass(frozen=True)
class AgentJob:
    """What an agent task needs (shipped in the task's closure)."""

    service: tuple[str, int]            # the driver's agent service
    secret: str                         # hex
    shared: Mapping[str, str]           # every worker's variables (the caller's env)
    executable: str | None = None
    grace: float = 5.0


def executor_pid() -> int:
    """The pid of this Python worker's executor JVM (the first ``java`` above it), or its
    parent's when there is none: the executor's identity on its host."""
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
                text = stat.read()
        except OSError:
            break
        name = text[text.index("(") + 1:text.rindex(")")]
        if name == "java":
            return pid
        pid = int(text[text.rindex(")") + 2:].split()[1])
    return os.getppid()


def read_frame(sock: socket.socket) -> dict:
    """The next frame on a connection that another thread also sends on (each send
    leaves its deadline's timeout on the socket): waits as long as the connection lives,
    READ_SECONDS at a time. Raises WireError or OSError when it ends."""
    while True:
        try:
            return wire.recv_frame(sock, time.monotonic() + READ_SECONDS)
        except wire.WireTimeout:
            continue


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def watch_executor(pid: int, gone: Callable[[], None], stop: threading.Event) -> None:
    """Call ``gone()`` once the executor JVM ``pid`` has ended (until ``stop`` is set):
    a worker must not outlive its executor, whose Python workers Spark may not have
    stopped yet."""
    def watch() -> None:
        while not stop.wait(EXECUTOR_POLL_SECONDS):
            if not alive(pid):
                gone()
                return

    threading.Thread(target=watch, daemon=True, name="gcurun-executor-watch").start()


def address_towards(host: str, port: int) -> str:
    """This host's address on the route to ``host`` (what the driver sees it as)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))
        return str(probe.getsockname()[0])


def connect(job: AgentJob) -> socket.socket:
    """An authenticated connection to the driver's agent service."""
    sock = open_channel(job.service, bytes.fromhex(job.secret), MAGIC, LABEL,
                        CONNECT_SECONDS)
    wire.set_liveness(sock, LIVENESS_SECONDS)
    return sock


class Agent:
    """One task slot's workers (see the module)."""

    def __init__(self, job: AgentJob, sock: socket.socket) -> None:
        self.job = job
        self.sock = sock
        self.workers: dict[int, subprocess.Popen] = {}
        self._send_lock = threading.Lock()

    def send(self, message: dict, data: bytes | None = None) -> None:
        """A frame to the driver (with ``data`` after it, its size in the frame)."""
        frame = wire.encode_frame(message if data is None else {**message, "bytes": len(data)})
        with self._send_lock, contextlib.suppress(OSError, wire.WireError):
            wire.send_all(self.sock, frame + (data or b""), time.monotonic() + SEND_SECONDS)

    def send_output(self, worker: int) -> Callable[[str, bytes], None]:
        return lambda stream, data: self.send(
            {"op": "output", "worker": worker, "stream": stream}, data)

    def serve(self) -> None:
        """Obey the driver until ``done`` or until its connection ends; then stop every
        worker still running."""
        try:
            while True:
                try:
                    frame = read_frame(self.sock)
                except (OSError, wire.WireError):
                    return
                if frame.get("op") == "start":
                    self.start(int(frame["worker"]), dict(frame["env"]),
                               frame.get("argv"))
                elif frame.get("op") == "stop":
                    self.stop(int(frame["worker"]))
                elif frame.get("op") == "done":
                    return
        finally:
            for worker in list(self.workers):
                self.stop(worker)

    def start(self, worker: int, planned: Mapping[str, str],
              argv: list[str] | None = None) -> None:
        """Start worker ``worker``: a rank (``python -m run_function``), or ``argv`` when
        the driver gives one (an MPI daemon's command line, under ``use_mpi``)."""
        env = merged_environment(os.environ, planned, {}, shared=self.job.shared)
        command = [str(a) for a in argv] if argv else \
            [self.job.executable or sys.executable, "-m", rank_side.__name__]
        try:
            process = subprocess.Popen(
                command, env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, preexec_fn=death_signal_setter(signal.SIGKILL))
        except OSError as exc:
            self.send({"op": "exit", "worker": worker, "code": 127, "signal": None,
                       "text": f"cannot start the worker: {exc}"})
            return
        self.workers[worker] = process
        self.send({"op": "started", "worker": worker, "pid": process.pid})
        pumps = pump([("stdout", process.stdout), ("stderr", process.stderr)],
                     self.send_output(worker))
        threading.Thread(target=self._watch, args=(worker, process, pumps), daemon=True,
                         name=f"gcurun-agent-{worker}").start()

    def _watch(self, worker: int, process: subprocess.Popen,
               pumps: list[threading.Thread]) -> None:
        code = process.wait()
        drain(pumps)      # its output reaches the driver before its exit
        self.send({"op": "exit", "worker": worker, "code": code if code >= 0 else None,
                   "signal": -code if code < 0 else None, "text": ""})

    def stop(self, worker: int) -> None:
        """SIGTERM to the worker's process group, the grace period, SIGKILL."""
        process = self.workers.pop(worker, None)
        if process is None or process.poll() is not None:
            return
        signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(self.job.grace)
        except subprocess.TimeoutExpired:
            signal_group(process.pid, signal.SIGKILL)
            process.wait()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def run_agent(job: AgentJob, _rows: Iterable[object]) -> Iterator[int]:
    """The body of each agent task: register, serve, report how many workers it ran."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None, "run_agent runs in a Spark task"
    sock = connect(job)
    agent = Agent(job, sock)
    executor, stop = executor_pid(), threading.Event()
    # The executor's end ends the agent (its connection closed: serve() returns and
    # stops the workers).
    watch_executor(executor, lambda: _shut(sock), stop)
    try:
        agent.send({"op": "agent", "host": address_towards(*job.service),
                    "executor": executor, "partition": context.partitionId(),
                    "attempt": context.attemptNumber()})
        agent.serve()
    finally:
        stop.set()
        sock.close()
    yield 0
