"""``gcurun.spark.run_elastic``: an elastic job whose workers run in Spark tasks.

gcurun's own elastic runner (:mod:`gcurun.launch.elastic`, the driver of ``gcurun
--min-np``) drives the job; only where workers start differs. The driver runs a Spark
stage of ``max_num_proc`` agent tasks (:mod:`gcurun.spark.agent`, a plain stage: one
lost task must not stop the others); each agent that starts registers with the
:class:`AgentService` and is one slot of its executor. Discovery reports the executors
that have agents as the job's hosts, so a lost executor leaves the job (its workers'
failure re-forms it from the last commit) and an added one, where Spark runs a pending or
retried agent task, joins at the next generation.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import logging
import pickle
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gcurun.hosts.api import HostSpec
from gcurun.launch.api import ExecutorErrorEvent, ExitEvent, OutputEvent
from gcurun.launch.elastic.records import Assignment
from gcurun.launch.elastic.runner import ElasticRunner
from gcurun.launch.function_service import listen, stop_serving
from gcurun.rendezvous import wire
from gcurun.spark._output import accept_channel
from gcurun.spark.agent import LABEL, LIVENESS_SECONDS, MAGIC, AgentJob, read_frame, run_agent

log = logging.getLogger("gcurun.spark")

HANDSHAKE_SECONDS = 30.0
SEND_SECONDS = 30.0


@dataclass(frozen=True)
class AgentInfo:
    """A registered agent: the slot of one task on one executor."""

    ident: int
    host: str               # the executor's host address
    executor: int           # the executor's JVM pid on that host
    partition: int = -1     # its Spark task's partition

    @property
    def slot_host(self) -> str:
        """The elastic job's name for the agent's executor: ``address-pid``."""
        return f"{self.host}-{self.executor}"


class AgentService:
    """The driver's end of the agents: registration, commands, exits (see the module).
    ``on_exit(worker, code, signal, text)`` and ``on_lost(workers, why)`` are called from
    the agents' reader threads."""

    def __init__(self, host: str, secret: bytes) -> None:
        self._host = host
        self._secret = secret
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._agents: dict[int, tuple[AgentInfo, socket.socket]] = {}
        self._workers: dict[int, int] = {}          # worker -> agent
        self._next = 0
        self._closed = False
        self.on_exit: Callable[[int, int | None, int | None, str], None] = \
            lambda *_: None
        self.on_lost: Callable[[tuple[int, ...], str], None] = lambda *_: None
        self.on_output: Callable[[int, str, bytes], None] = lambda *_: None
        # A connection that asks for a command on a host (gcurun's rsh agent under
        # ``run(use_mpi=True)``) is handed over: ``on_launch(conn, hello)`` serves it.
        self.on_launch: Callable[[socket.socket, dict], None] | None = None

    @property
    def address(self) -> tuple[str, int]:
        assert self._listener is not None
        return self._host, int(self._listener.getsockname()[1])

    def start(self) -> None:
        self._listener = listen(self._host, 128)
        threading.Thread(target=self._accept, daemon=True, name="gcurun-spark-agents").start()

    def hosts(self) -> tuple[HostSpec, ...]:
        """The executors with agents, each with a slot per agent (discovery's answer)."""
        with self._lock:
            counts: dict[str, int] = {}
            for info, _ in self._agents.values():
                counts[info.slot_host] = counts.get(info.slot_host, 0) + 1
        return tuple(HostSpec(name, slots=n) for name, n in counts.items())

    def registered(self) -> list[AgentInfo]:
        """Every registered agent, in the order they registered."""
        with self._lock:
            return [info for info, _ in self._agents.values()]

    def agents_of(self, slot_host: str) -> list[AgentInfo]:
        with self._lock:
            return [info for info, _ in self._agents.values() if info.slot_host == slot_host]

    def send(self, agent: int, message: dict) -> bool:
        with self._lock:
            entry = self._agents.get(agent)
            if message.get("op") == "start" and entry is not None:
                self._workers[int(message["worker"])] = agent
        if entry is None:
            return False
        try:
            wire.send_all(entry[1], wire.encode_frame(message),
                          time.monotonic() + SEND_SECONDS)
        except (OSError, wire.WireError):
            return False
        return True

    def close(self) -> None:
        """Tell every agent the job is done and stop listening."""
        with self._lock:
            self._closed = True
            agents = list(self._agents)
        for agent in agents:
            self.send(agent, {"op": "done"})
        stop_serving(self._listener)

    def connected(self) -> int:
        with self._lock:
            return len(self._agents)

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name="gcurun-spark-agent").start()

    def _serve(self, conn: socket.socket) -> None:
        ident = None
        try:
            info = self._greet(conn)
            if info is None:
                return
            ident = info.ident
            wire.set_liveness(conn, LIVENESS_SECONDS)
            while True:
                frame = read_frame(conn)
                if frame.get("op") == "output":
                    data = wire.recv_exact(conn, int(frame["bytes"]),
                                           time.monotonic() + SEND_SECONDS)
                    self.on_output(int(frame["worker"]), str(frame["stream"]), data)
                elif frame.get("op") == "exit":
                    self.on_exit(int(frame["worker"]), frame.get("code"),
                                 frame.get("signal"), str(frame.get("text") or ""))
        except (OSError, wire.WireError, ValueError, KeyError) as exc:
            log.info("an agent's connection ended: %s", exc)
        finally:
            conn.close()
            if ident is not None:
                self._forget(ident)

    def _greet(self, conn: socket.socket) -> AgentInfo | None:
        deadline = time.monotonic() + HANDSHAKE_SECONDS
        if not accept_channel(conn, self._secret, MAGIC, LABEL, deadline):
            return None
        hello = wire.recv_frame(conn, deadline)
        if hello.get("op") == "launch" and self.on_launch is not None:
            self.on_launch(conn, hello)
            return None
        if hello.get("op") != "agent":
            return None
        with self._lock:
            if self._closed:
                wire.send_all(conn, wire.encode_frame({"op": "done"}), deadline)
                return None
            info = AgentInfo(self._next, str(hello["host"]), int(hello["executor"]),
                             int(hello.get("partition", -1)))
            self._next += 1
            self._agents[info.ident] = (info, conn)
        log.info("agent %d registered on executor %s", info.ident, info.slot_host)
        return info

    def _forget(self, ident: int) -> None:
        with self._lock:
            self._agents.pop(ident, None)
            lost = tuple(w for w, a in self._workers.items() if a == ident)
            for worker in lost:
                del self._workers[worker]
            closed = self._closed
        if lost and not closed:
            self.on_lost(lost, "its Spark task or executor was lost")

    def forget_worker(self, worker: int) -> None:
        with self._lock:
            self._workers.pop(worker, None)


class AgentGroup:
    """The workers of one batch on one executor, run by its agents (a RankGroup)."""

    def __init__(self, service: AgentService, agents: Sequence[AgentInfo],
                 workers: Sequence[tuple[int, dict[str, str]]]) -> None:
        self.service = service
        self.agents = list(agents)
        self.workers = list(workers)
        self._running: dict[int, int] = {}   # worker -> agent
        self._lock = threading.Lock()

    def start(self, events: Any) -> None:
        for (worker, env), agent in zip(self.workers, self.agents, strict=False):
            with self._lock:
                self._running[worker] = agent.ident
            if not self.service.send(agent.ident, {"op": "start", "worker": worker,
                                                   "env": env}):
                log.warning("worker %d: the agent on %s is gone", worker, agent.slot_host)
                events.put(ExecutorErrorEvent((worker,), f"executor {agent.slot_host}: "
                                              "its agent is gone"))
        for worker, _ in self.workers[len(self.agents):]:
            log.warning("worker %d: no agent for its slot", worker)
            events.put(ExecutorErrorEvent((worker,), "no agent for this slot"))

    def terminate(self, grace_seconds: float) -> None:
        with self._lock:
            running, self._running = self._running, {}
        for worker, agent in running.items():
            self.service.send(agent, {"op": "stop", "worker": worker})

    def pids(self) -> dict[int, int]:
        return {}


class SparkElasticRunner(ElasticRunner):
    """gcurun's elastic runner, starting workers through Spark agents."""

    def __init__(self, *args: Any, agents: AgentService, driver_host: str,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agents = agents
        self.driver_host = driver_host
        agents.on_exit = self._on_exit
        agents.on_lost = self._on_lost
        agents.on_output = lambda worker, stream, data: self.events.put(
            OutputEvent(worker, stream, data))  # type: ignore[arg-type]

    def _on_exit(self, worker: int, code: int | None, signum: int | None, text: str) -> None:
        self.agents.forget_worker(worker)
        if code is None and signum is None:
            signum = signal.SIGKILL
        self.events.put(ExitEvent(worker, code, signum, text or None))

    def _on_lost(self, workers: tuple[int, ...], why: str) -> None:
        log.warning("workers %s lost: %s", list(workers), why)
        self.events.put(ExecutorErrorEvent(workers, why))

    def _make_group(self, spec: HostSpec, assignments: Sequence[Assignment]) -> AgentGroup:
        from gcurun.launch.elastic.plan import worker_plan
        from gcurun.launch.remote.rank_env import (
            ANY_ADDRESS,
            RENDEZVOUS_VARIABLE,
            SECRET_VARIABLE,
        )

        slots = max(a.slot for a in assignments) + 1
        host = dataclasses.replace(spec, slots=max(spec.slots, slots))
        plan = worker_plan(self.command, self.settings, (host,), assignments,
                           liveness=self.liveness)
        here = self.driver_host
        secrets = {RENDEZVOUS_VARIABLE: wire.show_address((here, self._port)),
                   SECRET_VARIABLE: self._secret.hex(),
                   **{name: value.replace(f"{ANY_ADDRESS}:", f"{here}:")
                      for name, value in self.extra_secrets.items()}}
        physical = spec.name.rsplit("-", 1)[0]
        workers = []
        for rank in plan.ranks:
            env = {**rank.env, **secrets, "GCURUN_HOSTNAME": physical,
                   "HOROVOD_HOSTNAME": physical}
            workers.append((rank.rank, env))
        agents = self.agents.agents_of(spec.name)
        by_slot = [agents[a.slot] for a in assignments if a.slot < len(agents)]
        return AgentGroup(self.agents, by_slot, workers)


def run_elastic(fn: Callable[..., Any], args: tuple[Any, ...] = (),
                kwargs: Mapping[str, Any] | None = None, num_proc: int | None = None,
                min_num_proc: int | None = None, max_num_proc: int | None = None,
                start_timeout: float | None = None, elastic_timeout: float | None = None,
                reset_limit: int | None = None, env: Mapping[str, str] | None = None,
                stdout: Any = None, stderr: Any = None, verbose: int = 1, nics: Any = None,
                prefix_output_with_timestamp: bool = False, min_np: int | None = None,
                max_np: int | None = None, executable: str | None = None) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` as an elastic job on the active Spark session; what
    each worker that finished returned, in the order the workers started (rank order
    when the job never re-formed).

    The job starts with ``num_proc`` workers (default: the session's default
    parallelism), runs on while at least ``min_num_proc`` (default ``num_proc``) are
    there and grows to ``max_num_proc`` (default ``num_proc``) as executors are added.
    ``fn`` calls ``hvd.init()`` and wraps its training in ``@hvd.elastic.run``; when an
    executor is lost, its workers fail and the others go back to the last commit.
    ``elastic_timeout`` bounds each wait for enough slots, ``reset_limit`` the number of
    re-formations; ``start_timeout`` the start of the first ``num_proc`` agents;
    ``nics``, ``stdout``, ``stderr`` and ``prefix_output_with_timestamp`` are as for
    :func:`gcurun.spark.run` (a worker's lines carry its worker id, as under ``gcurun
    --min-np``).

    Raises ElasticJobFailed when the job ends badly, SparkStartTimeout when the agents do
    not start in time, SparkUsageError for arguments that make no job. No worker or agent
    task is left running when it returns or raises.
    """
    from pyspark import SparkContext

    from gcurun.config.resolve import load_settings
    from gcurun.launch.elastic.config import elastic_config
    from gcurun.launch.function_service import FunctionService
    from gcurun.launch.library import MAX_WORKERS, elastic_settings
    from gcurun.launch.remote import run_function as rank_side
    from gcurun.launch.remote.rank_env import ANY_ADDRESS
    from gcurun.launch.supervision.output import OutputSink
    from gcurun.rendezvous.wire import new_secret
    from gcurun.spark._job import (
        SparkJob,
        check_num_proc,
        check_timeout,
        driver_address,
        network_environment,
    )
    from gcurun.spark.api import SparkStartTimeout, SparkUsageError

    context = SparkContext._active_spark_context
    if context is None:
        raise SparkUsageError("gcurun.spark.run_elastic: no active Spark session; create "
                              "one (SparkSession.builder.getOrCreate()) before running a job")
    size = check_num_proc(num_proc, context.defaultParallelism)
    timeout = check_timeout(start_timeout)
    given = {"min_num_proc": min_num_proc if min_num_proc is not None else
             (min_np if min_np is not None else size),
             "max_num_proc": max_num_proc, "max_np": max_np,
             "reset_limit": reset_limit, "elastic_timeout": elastic_timeout}
    cli = {**elastic_settings(given), "np": size}
    cli.setdefault("elastic.max_np", size)
    settings = load_settings(cli, None, {})
    config = elastic_config(settings)
    try:
        payload = rank_side.pack_call(functools.partial(fn, *args, **dict(kwargs or {})))
    except Exception as exc:
        raise SparkUsageError(f"gcurun.spark.run_elastic: the function or its arguments "
                              f"cannot be pickled ({type(exc).__name__}: {exc}); pass "
                              "picklable values") from None
    host = driver_address(context)
    secret = new_secret()
    service = FunctionService(payload, MAX_WORKERS, secret, host)
    agents = AgentService(host, secret)
    job: SparkJob | None = None
    try:
        service.start()
        agents.start()
        tasks = config.max_np or size
        job = SparkJob(tasks, functools.partial(run_agent, AgentJob(
            agents.address, secret.hex(), {**network_environment(nics), **{
                str(k): str(v) for k, v in dict(env or {}).items()}},
            executable=executable, grace=settings.grace_seconds)), barrier=False)
        job.start(context)
        deadline = time.monotonic() + timeout
        while agents.connected() < config.first_np:
            if job.done.is_set() or time.monotonic() >= deadline:
                raise SparkStartTimeout(
                    f"gcurun.spark.run_elastic: {agents.connected()} of {config.first_np} "
                    f"Spark tasks started within start_timeout={timeout:g} s; give fewer "
                    "ranks (num_proc), more executors or cores, or a longer start_timeout")
            time.sleep(0.2)
        runner = SparkElasticRunner(
            [executable or "python3", "-m", rank_side.__name__], settings, config,
            agents.hosts, OutputSink(stdout or sys.stdout, stderr or sys.stderr,
                                     timestamps=bool(prefix_output_with_timestamp)),
            stderr=sys.stderr if verbose else io.StringIO(),
            liveness=settings.liveness_timeout,
            extra_secrets={rank_side.ADDRESS_VARIABLE: f"{ANY_ADDRESS}:{service.port}",
                           rank_side.SECRET_VARIABLE: secret.hex()},
            agents=agents, driver_host=host)
        runner.run()
        return [pickle.loads(outcome.data) for _, outcome in sorted(service.outcomes.items())
                if outcome.ok]
    finally:
        agents.close()
        if job is not None:
            job.cancel(context)
        service.close()
