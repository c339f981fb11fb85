"""Elastic jobs on Ray: gcurun's elastic driver and runner (:mod:`gcurun.launch.elastic`),
with Ray actors for workers.

The driver decides as for ``gcurun --min-np`` over SSH (generations, blacklisting,
cooldown, the reset limit); :class:`RayElasticRunner` only changes how a batch of
workers on one host starts and stops: a placement group on that host's Ray node (one
bundle per worker) and one actor per worker in it, which runs the user's function under
the elastic loop of the runtime. Hosts are named as discovery names them; a host
``H`` is the Ray node with the resource ``node:H`` (Ray gives every node
``node:<its address>``; Horovod places its elastic workers the same way).
"""

from __future__ import annotations

import io
import logging
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gcurun.config.api import Settings
from gcurun.hosts.api import HostSpec
from gcurun.launch.api import ExitEvent, RankGroup
from gcurun.launch.elastic.config import ElasticConfig
from gcurun.launch.elastic.discovery import DiscoveryError
from gcurun.launch.elastic.plan import worker_environment
from gcurun.launch.elastic.records import Assignment
from gcurun.launch.elastic.runner import ElasticRunner
from gcurun.launch.remote.rank_env import RENDEZVOUS_VARIABLE, SECRET_VARIABLE
from gcurun.launch.supervision.output import OutputSink
from gcurun.rendezvous.wire import show_address

log = logging.getLogger("gcurun.ray")

# A host's node resource: each actor takes this much of ``node:<host>``.
NODE_SHARE = 0.001
POLL_SECONDS = 0.5


@dataclass
class ElasticJob:
    """What every worker of one elastic run gets: the function (``fn(executable)``),
    the executable, the variables shared by all, the resources of one worker, and where
    results and errors go (by worker id)."""

    fn: Callable[[Any], Any]
    executable_cls: type | None = None
    executable_args: Sequence[Any] = ()
    executable_kwargs: Mapping[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    cpus_per_worker: float = 1
    gpus_per_worker: float = 0
    start_timeout: float = 100
    liveness: float = 10.0
    queue: Any = None
    results: dict[int, Any] = field(default_factory=dict)
    errors: dict[int, BaseException] = field(default_factory=dict)

    def bundle(self, host: str) -> dict[str, float]:
        bundle = {"CPU": self.cpus_per_worker, "GPU": self.gpus_per_worker,
                  f"node:{host}": NODE_SHARE}
        return {name: amount for name, amount in bundle.items() if amount}


class RayWorkerGroup(RankGroup):
    """The workers of one batch on one host, as Ray actors in a placement group of that
    host. Reports each worker's end as an ExitEvent keyed by its worker id: 0 when its
    function returned (or the job removed it), 1 when it raised or its actor died,
    SIGKILL when :meth:`terminate` stopped it."""

    def __init__(self, host: str, assignments: Sequence[Assignment], job: ElasticJob,
                 env: Mapping[str, str]) -> None:
        self.host = host
        self.assignments = tuple(assignments)
        self.job = job
        self.env = dict(env)
        self._lock = threading.Lock()
        self._stopped = False
        self._actors: list[Any] = []
        self._pg: Any = None
        self._reported: set[int] = set()
        self._thread: threading.Thread | None = None
        self._events: Any = None

    def start(self, events: Any) -> None:
        self._events = events
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"ray-workers-{self.host}")
        self._thread.start()

    def terminate(self, grace_seconds: float) -> None:
        import ray

        with self._lock:
            self._stopped = True
            actors, self._actors = self._actors, []
            pg, self._pg = self._pg, None
        for actor in actors:
            ray.kill(actor, no_restart=True)
        if pg is not None:
            ray.util.remove_placement_group(pg)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(grace_seconds + POLL_SECONDS * 4)
        for a in self.assignments:
            self._exit(a.worker, None, int(signal.SIGKILL), "stopped by the job")

    def pids(self) -> dict[int, int]:
        return {}

    # -- the batch's life -------------------------------------------------------------------

    def _run(self) -> None:
        try:
            actors = self._create()
            if actors:
                self._watch(actors)
        except Exception as exc:  # noqa: BLE001 - any failure to start is the workers' exit
            for a in self.assignments:
                self._exit(a.worker, 1, None, f"could not start on Ray node {self.host}: "
                           f"{type(exc).__name__}: {exc}")

    def _create(self) -> list[tuple[Any, int]]:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from gcurun.ray.worker import BaseHorovodWorker

        bundle = self.job.bundle(self.host)
        pg = ray.util.placement_group([dict(bundle) for _ in self.assignments],
                                      strategy="STRICT_PACK")
        with self._lock:
            if self._stopped:
                ray.util.remove_placement_group(pg)
                return []
            self._pg = pg
        self._wait([pg.ready()], f"the placement group of {len(self.assignments)} x "
                   f"{bundle} on host {self.host}")
        remote: Any = ray.remote(BaseHorovodWorker)
        made = []
        with self._lock:
            if self._stopped:
                return []
            for index, a in enumerate(self.assignments):
                actor = remote.options(
                    num_cpus=self.job.cpus_per_worker, num_gpus=self.job.gpus_per_worker,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        pg, placement_group_bundle_index=index)).remote()
                self._actors.append(actor)
                made.append((actor, a.worker))
        calls = []
        for (actor, _), a in zip(made, self.assignments, strict=True):
            env = worker_environment(a, master_addr=self.env.get("MASTER_ADDR", a.host),
                                     master_port=0, liveness=self.job.liveness)
            calls.append(actor.update_env_vars.remote({**env, **self.env}))
            if self.job.queue is not None:
                calls.append(actor.set_queue.remote(self.job.queue))
        self._wait(calls, f"{len(made)} workers on host {self.host}")
        self._wait([actor.start_executable.remote(self.job.executable_cls,
                                                  self.job.executable_args,
                                                  self.job.executable_kwargs)
                    for actor, _ in made], f"the executables on host {self.host}")
        return made

    def _wait(self, refs: list[Any], what: str) -> None:
        """``ray.get(refs)`` within the job's start timeout, giving up when stopped."""
        import ray

        waited = 0.0
        pending = refs
        while pending:
            if self._stopped:
                raise RuntimeError("the job stopped these workers while they started")
            if waited >= self.job.start_timeout:
                raise TimeoutError(f"{what} not ready within {self.job.start_timeout:g} s")
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_SECONDS)
            waited += POLL_SECONDS
        ray.get(refs)

    def _watch(self, made: list[tuple[Any, int]]) -> None:
        import ray

        running = {actor.execute_elastic.remote(self.job.fn): worker for actor, worker in made}
        while running:
            ready, _ = ray.wait(list(running), num_returns=1, timeout=POLL_SECONDS)
            for ref in ready:
                worker = running.pop(ref)
                try:
                    finished, value = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    if self._stopped:
                        self._exit(worker, None, int(signal.SIGKILL), "stopped by the job")
                    else:
                        self._exit(worker, 1, None, f"its Ray actor died: {_first_line(exc)}")
                except Exception as exc:  # noqa: BLE001 - the function's error, kept
                    self.job.errors.setdefault(worker, exc)
                    self._exit(worker, 1, None, f"raised {_first_line(exc)}")
                else:
                    if finished:
                        self.job.results[worker] = value
                    self._exit(worker, 0, None)

    def _exit(self, worker: int, code: int | None, signum: int | None, text: str = "") -> None:
        with self._lock:
            if worker in self._reported:
                return
            self._reported.add(worker)
        if self._events is not None:
            self._events.put(ExitEvent(worker, code, signum, text or None))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"


class RayElasticRunner(ElasticRunner):
    """gcurun's elastic runner with Ray actors for workers (see the module's doc)."""

    def __init__(self, job: ElasticJob, config: ElasticConfig,
                 discover: Callable[[], tuple[HostSpec, ...]], *, grace_seconds: float = 5.0,
                 verbose: bool = False) -> None:
        super().__init__((), Settings(grace_seconds=grace_seconds), config, discover,
                         OutputSink(sys.stdout, sys.stderr),
                         stderr=sys.stderr if verbose else io.StringIO(),
                         liveness=job.liveness)
        self.job = job

    def _make_group(self, spec: HostSpec, assignments: Sequence[Assignment]) -> RankGroup:
        import ray

        driver = ray.util.get_node_ip_address()
        env = {RENDEZVOUS_VARIABLE: show_address((driver, self._port)),
               SECRET_VARIABLE: self._secret.hex(), "MASTER_ADDR": driver, **self.job.env}
        return RayWorkerGroup(spec.name, assignments, self.job, env)


def discovery_function(discovery: Any, timeout: float) -> Callable[[], tuple[HostSpec, ...]]:
    """The runner's ``discover()`` from a Horovod-style ``HostDiscovery`` object: its
    ``find_available_hosts_and_slots()`` as host specs; its errors as DiscoveryError."""
    def discover() -> tuple[HostSpec, ...]:
        try:
            found = dict(discovery.find_available_hosts_and_slots())
        except Exception as exc:  # noqa: BLE001 - a discovery failure, reported as one
            raise DiscoveryError(f"host discovery {type(discovery).__name__} raised "
                                 f"{type(exc).__name__}: {exc}") from None
        return tuple(HostSpec(str(name), slots=int(slots))
                     for name, slots in found.items() if int(slots) > 0)
    return discover


def rank_ordered(results: Mapping[int, Any], last: Sequence[int]) -> list[Any]:
    """The workers' results: the last generation's members in rank order, then any
    other worker that returned, by worker id."""
    order = [w for w in last if w in results] + sorted(w for w in results if w not in last)
    return [results[w] for w in order]


