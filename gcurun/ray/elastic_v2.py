"""Elastic jobs on Ray through ``RayExecutor(min_workers=...)`` (Horovod's
``horovod.ray.elastic_v2``): :class:`RayHostDiscovery` finds Ray's live nodes and their
slots, :class:`ElasticAdapter` runs a function as an elastic job whose workers are Ray
actors. The decisions (generations, blacklisting, cooldown, reset limit) are those of
``gcurun --min-np``; see :mod:`gcurun.ray._elastic`.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gcurun.launch.elastic.config import ElasticConfig, cooldown_problem
from gcurun.launch.elastic.runner import ElasticJobFailed
from gcurun.ray._calls import _Call, check_extra_env
from gcurun.ray._elastic import ElasticJob, RayElasticRunner, discovery_function, rank_ordered
from gcurun.ray.api import RayElasticJobFailed, RayUsageError
from gcurun.ray.discovery import HostDiscovery

log = logging.getLogger("gcurun.ray")

# How often the job asks discovery for the hosts (Horovod's name; read at each run).
DISCOVER_HOSTS_FREQUENCY_SECS = 1.0
TIMEOUT_VARIABLE = "GCURUN_TIMEOUT_SECONDS"
CALLBACK_POLL_SECONDS = 0.1


class RayHostDiscovery(HostDiscovery):
    """The live nodes of the Ray cluster as hosts (named by their address), each with
    as many slots as workers of ``cpus_per_worker`` CPUs (and, with ``use_gpu``,
    ``gpus_per_worker`` GPUs) its resources hold. Assumes the whole cluster is the
    job's, as Horovod's does."""

    def __init__(self, use_gpu: bool = False, cpus_per_worker: float = 1,
                 gpus_per_worker: float | None = 1) -> None:
        self.use_gpu = use_gpu
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = gpus_per_worker or 1

    def find_available_hosts_and_slots(self) -> dict[str, int]:
        import ray

        hosts: dict[str, int] = {}
        for node in ray.nodes():
            if not node.get("alive"):
                continue
            resources = node.get("Resources", {})
            slots = _fit(resources.get("CPU", 0), self.cpus_per_worker)
            if self.use_gpu:
                slots = min(slots, _fit(resources.get("GPU", 0), self.gpus_per_worker))
            if slots:
                hosts[str(node["NodeManagerAddress"])] = slots
        return hosts


def _fit(have: float, each: float) -> int:
    if not each:
        return 0 if not have else 1 << 30
    return int(math.floor(have / each + 1e-9))


@dataclass
class ElasticParams:
    """An elastic job's shape (Horovod's names), checked by :func:`check_elastic`."""

    min_workers: int = 1
    max_workers: int | None = None
    reset_limit: int | None = None
    cooldown_range: tuple[int, int] | None = None
    elastic_timeout: float = 600
    override_discovery: bool = True
    cpus_per_worker: float = 1
    use_gpu: bool = False
    gpus_per_worker: float | None = None

    @property
    def elastic(self) -> bool:
        return True


def check_elastic(num_workers: int | None, num_hosts: int | None, min_workers: int | None,
                  max_workers: int | None, reset_limit: int | None,
                  cooldown_range: Sequence[int] | None, elastic_timeout: float,
                  override_discovery: bool, cpus_per_worker: float, use_gpu: bool,
                  gpus_per_worker: float | None) -> ElasticParams | None:
    """The elastic job's shape, or None for a fixed-size job (no ``min_workers``).
    Raises RayUsageError (a ValueError) quoting the arguments that make no job."""
    if max_workers is not None and (not min_workers or min_workers <= 0):
        raise RayUsageError(f"RayExecutor(max_workers={max_workers!r}, min_workers="
                            f"{min_workers!r}): `max_workers` provided without any positive "
                            "`min_workers`; elastic jobs need min_workers of 1 or more")
    if min_workers is None:
        return None
    if num_workers:
        raise RayUsageError(f"RayExecutor(min_workers={min_workers!r}, num_workers="
                            f"{num_workers!r}): Both `min_workers` and `num_workers` provided. "
                            "Give min_workers (and max_workers) for an elastic job, or "
                            "num_workers for a fixed-size one")
    if num_hosts is not None:
        raise RayUsageError(f"RayExecutor(min_workers={min_workers!r}, num_hosts={num_hosts!r})"
                            ": an elastic job takes the hosts discovery finds; drop num_hosts")
    if not isinstance(min_workers, int) or min_workers < 1:
        raise RayUsageError(f"RayExecutor(min_workers={min_workers!r}): give a whole number "
                            "of at least 1")
    if max_workers is not None and max_workers < min_workers:
        raise RayUsageError(f"RayExecutor(max_workers={max_workers!r}) is below min_workers="
                            f"{min_workers}; give max_workers of at least {min_workers}")
    if reset_limit is not None and reset_limit < 0:
        raise RayUsageError(f"RayExecutor(reset_limit={reset_limit!r}): give 0 or more resets")
    if not elastic_timeout or elastic_timeout <= 0:
        raise RayUsageError(f"RayExecutor(elastic_timeout={elastic_timeout!r}): give a "
                            "positive number of seconds")
    cooldown = _check_cooldown(cooldown_range)
    if gpus_per_worker and not use_gpu:
        raise RayUsageError(f"RayExecutor(gpus_per_worker={gpus_per_worker!r}, use_gpu=False): "
                            "gpus_per_worker needs use_gpu=True")
    return ElasticParams(min_workers=min_workers, max_workers=max_workers,
                         reset_limit=reset_limit, cooldown_range=cooldown,
                         elastic_timeout=elastic_timeout, override_discovery=override_discovery,
                         cpus_per_worker=cpus_per_worker, use_gpu=use_gpu,
                         gpus_per_worker=gpus_per_worker or int(use_gpu) or None)


def _check_cooldown(cooldown_range: Sequence[int] | None) -> tuple[int, int] | None:
    if cooldown_range is None:
        return None
    given = f"RayExecutor(cooldown_range={cooldown_range!r})"
    if len(cooldown_range) != 2:
        raise RayUsageError(f"{given}: give (MIN, MAX) seconds")
    low, high = int(cooldown_range[0]), int(cooldown_range[1])
    problem = cooldown_problem(low, high)
    if problem:
        raise RayUsageError(f"{given}: {problem}")
    return low, high


class ElasticAdapter:
    """The driver of an elastic job on Ray (in the caller's process, or in an actor when
    the caller is a Ray client). Each :meth:`run` is one elastic job: it waits for
    ``min_workers`` slots, starts a worker (an actor) per slot up to ``max_workers``,
    re-forms the job from the last ``commit()`` when a worker dies or the hosts change,
    and returns what the workers that finished returned."""

    def __init__(self, settings: Any, min_workers: int, max_workers: int | None = None,
                 use_gpu: bool = False, cpus_per_worker: float = 1,
                 gpus_per_worker: float | None = None, override_discovery: bool = True,
                 reset_limit: int | None = None,
                 cooldown_range: tuple[int, int] | None = None,
                 elastic_timeout: float = 600) -> None:
        self.settings = settings
        if override_discovery or getattr(settings, "discovery", None) is None:
            settings.discovery = RayHostDiscovery(use_gpu=use_gpu,
                                                  cpus_per_worker=cpus_per_worker,
                                                  gpus_per_worker=gpus_per_worker)
        self.params = ElasticParams(min_workers, max_workers, reset_limit, cooldown_range,
                                    elastic_timeout, override_discovery, cpus_per_worker,
                                    use_gpu, gpus_per_worker)
        self.env: dict[str, str] = {}
        self.executable: tuple[type | None, Sequence[Any], Mapping[str, Any]] = (None, (), {})
        self.started = False

    def start(self, executable_cls: type | None = None,
              executable_args: Sequence[Any] | None = None,
              executable_kwargs: Mapping[str, Any] | None = None,
              extra_env_vars: Mapping[str, Any] | None = None) -> None:
        """Remember what every worker gets; the workers start with each :meth:`run`."""
        self.env = check_extra_env(extra_env_vars or {}, None)
        self.executable = (executable_cls, tuple(executable_args or ()),
                           dict(executable_kwargs or {}))
        self.started = True

    def run(self, fn: Callable[..., Any], args: Sequence[Any] | None = None,
            kwargs: Mapping[str, Any] | None = None,
            callbacks: Sequence[Callable[[Any], None]] | None = None) -> list[Any]:
        return self._run(_Call(fn, args, kwargs), callbacks)

    def execute(self, fn: Callable[[Any], Any],
                callbacks: Sequence[Callable[[Any], None]] | None = None) -> list[Any]:
        return self._run(fn, callbacks)

    def run_remote(self, fn: Callable[..., Any], args: Any = None, kwargs: Any = None) -> Any:
        raise NotImplementedError("run_remote: an elastic job's workers come and go, so "
                                  "there are no object refs to return; use run()")

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        raise NotImplementedError("execute_single: an elastic job has no fixed rank 0; "
                                  "use execute()")

    def shutdown(self) -> None:
        """Nothing outlives a run; forget the executable."""
        self.started = False

    def config(self) -> ElasticConfig:
        p = self.params
        return ElasticConfig(min_np=p.min_workers, max_np=p.max_workers,
                             elastic_timeout=float(p.elastic_timeout),
                             reset_limit=p.reset_limit, cooldown=p.cooldown_range,
                             discovery_interval=float(DISCOVER_HOSTS_FREQUENCY_SECS))

    def _run(self, fn: Callable[[Any], Any],
             callbacks: Sequence[Callable[[Any], None]] | None) -> list[Any]:
        p, settings = self.params, self.settings
        queue = _callback_queue() if callbacks else None
        cls, args, kwargs = self.executable
        job = ElasticJob(fn, cls, args, kwargs,
                         env={TIMEOUT_VARIABLE: f"{float(settings.timeout_s):g}", **self.env},
                         cpus_per_worker=p.cpus_per_worker,
                         gpus_per_worker=float(p.gpus_per_worker or 0) if p.use_gpu else 0,
                         start_timeout=float(getattr(settings, "placement_group_timeout_s",
                                                     100)),
                         queue=queue)
        runner = RayElasticRunner(job, self.config(),
                                  discovery_function(settings.discovery, 30.0),
                                  verbose=getattr(settings, "verbose", 1) >= 2)
        pump = _CallbackPump(queue, callbacks or ())
        try:
            runner.run()
        except ElasticJobFailed as exc:
            cause = next(iter(job.errors.values()), None)
            raise RayElasticJobFailed(f"gcurun.ray: the elastic job failed: {exc}") from cause
        finally:
            pump.close()
        return rank_ordered(job.results, runner.driver.members)


def _callback_queue() -> Any:
    from ray.util.queue import Queue

    return Queue(actor_options={"num_cpus": 0})


class _CallbackPump:
    """Calls ``callbacks`` with every value the workers log, in a thread, until
    :meth:`close` (which delivers what is left and removes the queue's actor)."""

    def __init__(self, queue: Any, callbacks: Sequence[Callable[[Any], None]]) -> None:
        self.queue, self.callbacks = queue, list(callbacks)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if queue is not None:
            self._thread = threading.Thread(target=self._pump, daemon=True,
                                            name="ray-callbacks")
            self._thread.start()

    def _pump(self) -> None:
        from ray.util.queue import Empty

        while not self._stop.is_set():
            try:
                self._deliver(self.queue.get(timeout=CALLBACK_POLL_SECONDS))
            except Empty:
                continue

    def _deliver(self, value: Any) -> None:
        for callback in self.callbacks:
            try:
                callback(value)
            except Exception:  # noqa: BLE001 - a callback's error must not stop the job
                log.exception("a callback raised on %r", value)

    def close(self) -> None:
        if self.queue is None:
            return
        from ray.util.queue import Empty

        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        while True:
            try:
                self._deliver(self.queue.get_nowait())
            except Empty:
                break
        self.queue.shutdown()
