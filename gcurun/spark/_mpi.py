"""``gcurun.spark.run(fn, use_mpi=True)``: ranks started by mpirun, inside Spark tasks.

Horovod's way, so every rank lives in a Spark task:

1. The driver runs a barrier stage of ``num_proc`` agent tasks (:mod:`gcurun.spark.agent`,
   the tasks of ``run_elastic``); each registers with the driver's
   :class:`~gcurun.spark.elastic.AgentService` and holds its slot until the job ends.
2. mpirun runs on the driver, its command built by :mod:`gcurun.launch.mpi` from a plan
   of the tasks' hosts and counts (laid out by :mod:`gcurun.spark._layout`: hosts in the
   order of their first partition), with Open MPI's rsh agent set to
   :mod:`gcurun.spark._rsh` (``--prtemca plm_ssh_agent`` in Open MPI 5, ``--mca
   plm_rsh_agent`` in 4), no tree spawn, and the daemons left attached to their agent
   (no ``--daemonize``: a daemon that stays the agent's child stays in its task).
3. The rsh agent asks the service (:class:`DaemonRelay`) to have HOST's first task run
   the daemon's command line; the task starts it as a worker, forwards its output and
   its exit; the relay passes them back. When the agent's connection ends (mpirun ended
   it), the task stops the daemon; when a task is lost, its daemon's agent exits 255 and
   mpirun ends the job.
4. The daemons start ``python -m gcurun.launch.remote.mpi_shim -- python -m
   gcurun.launch.remote.run_function``: the shim turns ``OMPI_COMM_WORLD_*`` into gcurun's
   rank variables, the rank fetches the function from the driver's service, and the
   runtime uses its mpi backend. mpirun tags the ranks' output, which gcurun's
   supervision prefixes and writes, as under ``gcurun --mpi``.

mpirun starts the ranks of a host that is its own (the driver's, 127.0.0.1) itself,
without the agent.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from gcurun.errors import JobInterrupted, LaunchError, RanksFailedError
from gcurun.launch.api import ExecutorErrorEvent
from gcurun.launch.function_service import FunctionService
from gcurun.launch.supervision.output import OutputSink
from gcurun.rendezvous import wire
from gcurun.spark._rsh import EXIT_LOST, RELAY_VARIABLE
from gcurun.spark.api import SparkJobFailed, SparkStartTimeout, SparkUsageError
from gcurun.spark.elastic import AgentInfo, AgentService

log = logging.getLogger("gcurun.spark")

SEND_SECONDS = 30.0
# How long the tasks may take to end once the job is over.
END_SECONDS = 60.0
OUTCOME_WAIT_SECONDS = 10.0
RSH_MODULE = "gcurun.spark._rsh"


class DaemonRelay:
    """The driver's end of :mod:`gcurun.spark._rsh`: each agent connection names a host
    and a command; the host's first task (lowest partition) runs it as a worker of the
    :class:`AgentService`, whose output and exit frames go back on that connection."""

    def __init__(self, agents: AgentService) -> None:
        self.agents = agents
        self._lock = threading.Lock()
        self._conns: dict[int, socket.socket] = {}
        self._send_locks: dict[int, threading.Lock] = {}
        self._next = 0
        self.launched: dict[int, str] = {}       # worker -> host, every daemon started
        agents.on_launch = self.launch
        agents.on_output = self._output
        agents.on_exit = self._exit
        agents.on_lost = self._lost

    def task_of(self, host: str) -> AgentInfo | None:
        there = [a for a in self.agents.registered() if a.host == host]
        return min(there, key=lambda a: a.partition) if there else None

    def launch(self, conn: socket.socket, hello: dict) -> None:
        """Serve one rsh agent's connection until it ends; then stop its daemon."""
        host, argv = str(hello.get("host")), [str(a) for a in hello.get("argv") or []]
        with self._lock:
            worker, self._next = self._next, self._next + 1
            self._conns[worker] = conn
            self._send_locks[worker] = threading.Lock()
        task = self.task_of(host)
        if task is None or not argv:
            self._send(worker, {"op": "exit", "code": EXIT_LOST, "signal": None,
                                "text": f"no Spark task of this job runs on {host}"})
            self._drop(worker)
            return
        self.launched[worker] = host
        log.info("MPI daemon %d on %s, in Spark task %d", worker, host, task.partition)
        if not self.agents.send(task.ident, {"op": "start", "worker": worker, "env": {},
                                             "argv": argv}):
            self._lost((worker,), f"the Spark task on {host} is gone")
        try:
            while True:     # the agent sends nothing more: this ends with it
                wire.recv_frame(conn, None)
        except (OSError, wire.WireError):
            pass
        self.agents.send(task.ident, {"op": "stop", "worker": worker})
        self._drop(worker)

    def _send(self, worker: int, message: dict, data: bytes = b"") -> None:
        with self._lock:
            conn, lock = self._conns.get(worker), self._send_locks.get(worker)
        if conn is None or lock is None:
            return
        frame = wire.encode_frame({**message, "bytes": len(data)} if data else message)
        with lock, contextlib.suppress(OSError, wire.WireError):
            wire.send_all(conn, frame + data, time.monotonic() + SEND_SECONDS)

    def _drop(self, worker: int) -> None:
        with self._lock:
            conn = self._conns.pop(worker, None)
            self._send_locks.pop(worker, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _output(self, worker: int, stream: str, data: bytes) -> None:
        if data:
            self._send(worker, {"op": "output", "stream": stream}, data)

    def _exit(self, worker: int, code: int | None, signum: int | None, text: str) -> None:
        self.agents.forget_worker(worker)
        self._send(worker, {"op": "exit", "code": code, "signal": signum, "text": text})
        self._drop(worker)

    def _lost(self, workers: tuple[int, ...], why: str) -> None:
        for worker in workers:
            self._exit(worker, EXIT_LOST, None, why)


def agent_arguments(flavour: Any, python: str) -> list[str]:
    """mpirun's arguments that make :mod:`gcurun.spark._rsh` its rsh agent (Open MPI 5:
    PRRTE's ``plm_ssh_*``; 4: ``plm_rsh_*``), with no tree spawn and the daemons left
    attached. Raises SparkUsageError for a flavour without an rsh agent setting."""
    if flavour.kind != "openmpi":
        raise SparkUsageError(
            f"gcurun.spark.run(use_mpi=True): mpirun is {flavour.name}, but the daemons "
            "can be started inside Spark tasks only by Open MPI (its rsh agent setting); "
            "put Open MPI's mpirun first (GCURUN_MPIRUN), or leave use_mpi out")
    agent = f"{python} -m {RSH_MODULE}"
    if flavour.major >= 5:
        return ["--prtemca", "plm_ssh_agent", agent, "--prtemca", "plm_ssh_no_tree_spawn",
                "1", "--leave-session-attached"]
    return ["--mca", "plm_rsh_agent", agent, "--mca", "plm_rsh_no_tree_spawn", "1",
            "--leave-session-attached"]


def wait_for_tasks(agents: AgentService, job: Any, size: int, timeout: float) -> list[str]:
    """The host of each partition's task once all ``size`` registered (``timeout``).
    Raises SparkStartTimeout."""
    deadline = time.monotonic() + timeout
    while agents.connected() < size:
        if job.done.is_set() or time.monotonic() >= deadline:
            raise SparkStartTimeout(
                f"gcurun.spark.run: {agents.connected()} of {size} ranks' Spark tasks "
                f"started within start_timeout={timeout:g} s; a barrier stage needs {size} "
                "free task slots at once: give fewer ranks (num_proc), more executors or "
                "cores, or a longer start_timeout")
        time.sleep(0.1)
    return [a.host for a in sorted(agents.registered(), key=lambda a: a.partition)]


def run_mpi(context: Any, payload: bytes, size: int, host: str, timeout: float,
            env: Mapping[str, str], executable: str | None, sink: OutputSink,
            extra_mpi_args: str | None, nics: str | None) -> list[Any]:
    """The job of ``run(use_mpi=True)`` (see the module); results in rank order."""
    import functools

    from gcurun.rendezvous.wire import new_secret
    from gcurun.spark._job import SparkJob
    from gcurun.spark.agent import AgentJob, run_agent

    secret = new_secret()
    service = FunctionService(payload, size, secret, host)
    agents = AgentService(host, secret)
    relay = DaemonRelay(agents)
    job: SparkJob | None = None
    try:
        service.start()
        agents.start()
        job = SparkJob(size, functools.partial(run_agent, AgentJob(
            agents.address, secret.hex(), dict(env), executable=executable)))
        job.start(context)
        hosts = wait_for_tasks(agents, job, size, timeout)
        return _mpirun(hosts, service, relay, job, host, secret, env, executable, sink,
                       extra_mpi_args, nics, timeout)
    finally:
        agents.close()
        if job is not None and not job.done.wait(END_SECONDS):
            job.cancel(context)
        service.close()
        sink.finish_all()


def mpirun_settings(hosts: list[str], size: int, env: Mapping[str, str],
                    mpi_args: list[str], nics: str | None) -> Any:
    """gcurun's settings for the mpirun job on ``hosts`` (a host per partition)."""
    from gcurun.config.resolve import load_settings
    from gcurun.hosts.specs import parse_host_specs
    from gcurun.spark._layout import hosts_text

    cli: dict[str, Any] = {"launcher": "mpi", "np": size,
                           "hosts": parse_host_specs(hosts_text(hosts)),
                           "mpi.args": tuple(mpi_args)}
    if env:
        cli["env"] = dict(env)
    if nics:
        cli["mpi.network_interface"] = nics
    return load_settings(cli, None, os.environ)


def _mpirun(hosts: list[str], service: FunctionService, relay: DaemonRelay, job: Any,
            host: str, secret: bytes, env: Mapping[str, str], executable: str | None,
            sink: OutputSink, extra_mpi_args: str | None, nics: str | None,
            timeout: float) -> list[Any]:
    from gcurun.launch.mpi.command import mpirun_program, probe_mpi_flavour
    from gcurun.launch.mpi.install import program_environment
    from gcurun.launch.remote import run_function as rank_side
    from gcurun.spark._job import function_error

    size = len(hosts)
    python = executable or sys.executable
    try:
        extra = shlex.split(extra_mpi_args or "")
    except ValueError as exc:
        raise SparkUsageError(f"gcurun.spark.run(extra_mpi_args={extra_mpi_args!r}): "
                              f"{str(exc).lower()}; quote the arguments as a shell would") \
            from None
    probe = mpirun_settings(hosts, size, env, [], nics)
    mpirun = mpirun_program(probe.mpi.mpirun)
    flavour = probe_mpi_flavour(mpirun, env={**os.environ,
                                             **program_environment(mpirun, os.environ)})
    settings = mpirun_settings(hosts, size, env, agent_arguments(flavour, sys.executable)
                               + extra, nics)
    secrets = {rank_side.ADDRESS_VARIABLE: wire.show_address((host, service.port)),
               rank_side.SECRET_VARIABLE: secret.hex()}
    late: list[str] = []        # why the ranks' start deadline stopped mpirun, if it did
    try:
        _supervise(python, settings, flavour, secrets,
                   {RELAY_VARIABLE: wire.show_address(relay.agents.address)}, sink, job,
                   lambda: service.started, timeout, late)
    except JobInterrupted as exc:
        if exc.signum == signal.SIGINT:      # Ctrl-C: mpirun is stopped; as without MPI
            raise KeyboardInterrupt from exc
        raise
    except RanksFailedError as exc:
        # mpirun does not always say which rank failed first (its message can be
        # missing): a rank whose function raised is the root cause whatever it said.
        service.wait_until(lambda s: any(not o.ok for o in s.outcomes.values()) or
                           s.started <= set(s.outcomes) | s.dropped, OUTCOME_WAIT_SECONDS)
        failed = [(rank, o) for rank, o in service.outcomes.items() if not o.ok]
        if failed:
            error = function_error(failed, service.hosts)
            raise error from error.__cause__
        if job.done.is_set():
            raise spark_ended(job, exc) from exc
        if late:
            raise LaunchError(f"gcurun.spark.run: {late[0]}; mpirun was stopped ({exc})") \
                from exc
        raise
    ranks = list(range(size))
    if not service.wait_for(ranks, OUTCOME_WAIT_SECONDS):
        missing = [r for r in ranks if r not in service.outcomes]
        raise LaunchError(f"gcurun.spark.run: ranks {missing} exited without returning a "
                          "result (did the function end its process?)")
    return [pickle.loads(service.outcomes[r].data) for r in ranks]


def spark_ended(job: Any, exc: RanksFailedError) -> SparkJobFailed:
    why = f": {type(job.error).__name__}: {str(job.error).strip().splitlines()[0]}" \
        if job.error is not None and str(job.error).strip() else ""
    return SparkJobFailed(f"gcurun.spark.run: the Spark job of the ranks' tasks ended "
                          f"before the ranks did{why}; mpirun was stopped ({exc})")


def _supervise(python: str, settings: Any, flavour: Any, secrets: Mapping[str, str],
               launcher_env: Mapping[str, str], sink: OutputSink, job: Any,
               started: Callable[[], set[int]], timeout: float, late: list[str]) -> None:
    """mpirun under gcurun's supervision (what :func:`gcurun.launch.execute.execute` does
    for ``gcurun --mpi``), its own environment with ``launcher_env`` added (never the
    ranks'), stopped when the Spark job ends first, or when ``timeout`` seconds after its
    start some rank has not fetched its function (``started()``: the ranks that did; a
    daemon that never came up leaves mpirun waiting with no deadline of its own; why goes
    into ``late``)."""
    from gcurun.launch.execute import signals_to
    from gcurun.launch.mpi.rank_group import MpiRankGroup, mpi_command
    from gcurun.launch.prepare import prepare
    from gcurun.launch.remote import run_function as rank_side
    from gcurun.launch.supervision.supervise import EventQueue, stop_groups, supervise

    with prepare([python, "-m", rank_side.__name__], settings, connect=False) as prepared:
        plan = prepared.plan
        tmp = tempfile.mkdtemp(prefix="gcurun-mpi-")
        command, _ = mpi_command(plan, settings, secrets=secrets, flavour=flavour,
                                 folder=tmp)
        group = MpiRankGroup(plan, command, flavour, base_env={**os.environ, **launcher_env},
                             cleanup_dir=tmp, grace_seconds=settings.grace_seconds)
        events = EventQueue()
        over = threading.Event()

        def watch() -> None:
            deadline = time.monotonic() + timeout
            while not over.wait(0.2):
                if job.done.is_set():       # the Spark job ended (cancelled) before mpirun
                    events.put(ExecutorErrorEvent(tuple(r.rank for r in plan.ranks),
                                                  "the Spark job of the ranks' tasks ended"))
                    return
                missing = sorted({r.rank for r in plan.ranks} - started())
                if missing and time.monotonic() > deadline:
                    late.append(f"rank(s) {', '.join(map(str, missing))} did not start "
                                f"within start_timeout={timeout:g} s of mpirun's start (an "
                                "MPI daemon that did not come up); give a longer "
                                "start_timeout if the executors are slow")
                    events.put(ExecutorErrorEvent(tuple(missing), late[0]))
                    return

        with signals_to(events):
            try:
                group.start(events)  # type: ignore[arg-type]
            except BaseException:
                for thread in stop_groups([group], settings.grace_seconds):
                    thread.join()
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            threading.Thread(target=watch, daemon=True, name="gcurun-spark-watch").start()
            try:
                supervise([group], events, {r.rank: r.host for r in plan.ranks}, sink,
                          grace_seconds=settings.grace_seconds)
            finally:
                over.set()
