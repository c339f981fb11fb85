"""Horovod's ``RayExecutor`` on gcurun: a fixed set of Ray actors, one per rank, joined
through gcurun's rendezvous (``horovod.ray.runner``'s names and behaviour).

The executor reserves the job's resources in a placement group (:mod:`.strategy`),
creates the actors, learns which Ray node each landed on, numbers the ranks node by node
(:mod:`._layout`), gives every actor its rank environment (the variables ``gcurun``'s own
launchers set) and the job's rendezvous and secret, then creates the user's executable
in each. ``hvd.init()`` in a function given to :meth:`RayExecutor.execute` joins the job
over the tcp runtime. :meth:`RayExecutor.shutdown` kills every actor and removes the
placement group.
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gcurun.errors import CollectiveError
from gcurun.ray._calls import _Call, check_extra_env
from gcurun.ray._layout import WorkerSite, horovod_facts, rank_order, rank_places
from gcurun.ray._layout import worker_environments as _worker_environments
from gcurun.ray._rendezvous import JobRendezvous, rendezvous_host
from gcurun.ray.api import ExecutorStateError, RayStartTimeout, RayUsageError
from gcurun.ray.strategy import (
    PLACEMENT_STRATEGIES,
    BaseStrategy,
    ColocatedStrategy,
    PGStrategy,
    PlacementStrategy,
)

if TYPE_CHECKING:
    from gcurun.ray.elastic_v2 import ElasticParams

log = logging.getLogger("gcurun.ray")

# How long shutdown lets ranks leave the runtime, then waits for killed actors to exit.
LEAVE_SECONDS = 5.0
EXIT_SECONDS = 10.0
# After a rank's failure, how long to wait for the others' errors before choosing the
# root cause (the others fail within milliseconds: the failing rank aborts the job).
ROOT_CAUSE_SECONDS = 5.0
# The device variable for Ray's GPU resource.
GPU_DEVICE_VARIABLE = "CUDA_VISIBLE_DEVICES"
TIMEOUT_VARIABLE = "GCURUN_TIMEOUT_SECONDS"


@dataclass
class MiniSettings:
    """The settings of a Ray job (Horovod's names). ``timeout_s`` bounds the start of
    the actors, the rendezvous of the ranks and any collective that makes no progress
    (GCURUN_TIMEOUT_SECONDS on every rank); ``placement_group_timeout_s`` the placement
    of the job's resources. ``nics``, ``ssh_*`` and ``key`` are accepted for Horovod's
    code and unused: ranks find each other through the rendezvous."""

    nics: set | None = None
    verbose: int = 1
    key: str | None = None
    ssh_port: int | None = None
    ssh_identity_file: str | None = None
    timeout_s: float = 300
    placement_group_timeout_s: float = 100
    elastic: bool = False
    discovery: Any = None


class Coordinator:
    """Where the ranks are (registered by node) and the job's rendezvous."""

    def __init__(self, settings: MiniSettings) -> None:
        self.settings = settings
        self.node_id_by_rank: dict[str, list[int]] = defaultdict(list)
        self._hostnames: set[str] = set()
        self._rendezvous: JobRendezvous | None = None

    @property
    def world_size(self) -> int:
        return sum(len(ranks) for ranks in self.node_id_by_rank.values())

    @property
    def hostnames(self) -> set[str]:
        return self._hostnames

    @property
    def node_id_string(self) -> str:
        return ",".join(f"{node}:{len(ranks)}" for node, ranks in self.node_id_by_rank.items())

    def register(self, hostname: str, node_id: str, world_rank: int) -> None:
        self._hostnames.add(hostname)
        self.node_id_by_rank[node_id].append(world_rank)

    def node_of_rank(self) -> list[str]:
        """Each rank's node, in rank order. Raises RayUsageError unless the registered
        ranks are 0..n-1, each once."""
        node_of: dict[int, str] = {}
        for node, ranks in self.node_id_by_rank.items():
            for rank in ranks:
                if rank in node_of:
                    raise RayUsageError(f"rank {rank} registered twice (nodes "
                                        f"{node_of[rank]!r} and {node!r})")
                node_of[rank] = node
        if sorted(node_of) != list(range(len(node_of))):
            raise RayUsageError(f"registered ranks {sorted(node_of)} are not 0..{len(node_of) - 1}")
        return [node_of[r] for r in range(len(node_of))]

    def finalize_registration(self) -> dict[int, dict[str, int]]:
        """Each rank's HOROVOD_LOCAL_RANK/SIZE and HOROVOD_CROSS_RANK/SIZE."""
        return {place.rank: dict(horovod_facts(place))
                for place in rank_places(self.node_of_rank())}

    def establish_rendezvous(self) -> dict[str, str]:
        """Serve the ranks' rendezvous; returns the variables every rank needs to join
        it (GCURUN_RENDEZVOUS, GCURUN_SECRET). Served until :meth:`close`."""
        import ray

        self.close()
        host = rendezvous_host(str(ray.get_runtime_context().get_node_id()),
                               ray.util.get_node_ip_address(), list(self.node_id_by_rank))
        self._rendezvous = JobRendezvous(host, max(1, self.world_size))
        return self._rendezvous.environment()

    def close(self) -> None:
        """Stop serving the rendezvous. Idempotent."""
        rendezvous, self._rendezvous = self._rendezvous, None
        if rendezvous is not None:
            rendezvous.close()


@dataclass(frozen=True)
class StaticParams:
    """A fixed-size job's shape, checked (see :class:`RayExecutor`)."""

    num_workers: int | None = None
    num_hosts: int | None = None
    num_workers_per_host: int = 1
    cpus_per_worker: float = 1
    use_gpu: bool = False
    gpus_per_worker: float | None = None
    use_current_placement_group: bool = True
    placement_strategy: PlacementStrategy = "PACK"

    @property
    def elastic(self) -> bool:
        return False


def check_params(num_workers: int | None, num_hosts: int | None,
                 num_workers_per_host: int | None, cpus_per_worker: float, use_gpu: bool,
                 gpus_per_worker: float | None, use_current_placement_group: bool,
                 placement_strategy: str) -> StaticParams:
    """The job's shape, or RayUsageError quoting the argument that cannot make one."""
    if num_workers is not None and num_hosts is not None:
        raise RayUsageError(f"RayExecutor(num_workers={num_workers}, num_hosts={num_hosts}): "
                            "give num_workers, or num_hosts with num_workers_per_host, "
                            "not both")
    if num_workers is None and num_hosts is None:
        raise RayUsageError("RayExecutor: give num_workers=N (ranks placed by the "
                            "placement group), num_hosts=H with num_workers_per_host=W, or "
                            "min_workers=N for an elastic job")
    for name, value in (("num_workers", num_workers), ("num_hosts", num_hosts)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise RayUsageError(f"RayExecutor({name}={value!r}): {name} must be a whole "
                                "number of at least 1")
    per_host = 1 if num_workers_per_host is None else num_workers_per_host
    if not isinstance(per_host, int) or per_host < 1:
        raise RayUsageError(f"RayExecutor(num_workers_per_host={num_workers_per_host!r}): "
                            "it must be a whole number of at least 1")
    if cpus_per_worker is None or cpus_per_worker < 0:
        raise RayUsageError(f"RayExecutor(cpus_per_worker={cpus_per_worker!r}): give a "
                            "number of CPUs, 0 or more")
    if gpus_per_worker and not use_gpu:
        raise RayUsageError(f"RayExecutor(gpus_per_worker={gpus_per_worker!r}, use_gpu=False): "
                            "gpus_per_worker needs use_gpu=True")
    if use_gpu and gpus_per_worker is not None and gpus_per_worker <= 0:
        raise RayUsageError(f"RayExecutor(gpus_per_worker={gpus_per_worker!r}): with use_gpu "
                            "each worker needs more than 0 GPUs")
    if placement_strategy not in PLACEMENT_STRATEGIES:
        raise RayUsageError(f"RayExecutor(placement_strategy={placement_strategy!r}): use one "
                            f"of {', '.join(PLACEMENT_STRATEGIES)}")
    return StaticParams(num_workers=num_workers, num_hosts=num_hosts,
                        num_workers_per_host=per_host, cpus_per_worker=cpus_per_worker,
                        use_gpu=use_gpu, gpus_per_worker=gpus_per_worker or int(use_gpu) or None,
                        use_current_placement_group=use_current_placement_group,
                        placement_strategy=placement_strategy)  # type: ignore[arg-type]


class RayExecutor:
    """A fixed set of ranks, each a Ray actor (Horovod's ``RayExecutor``).

    ``num_workers`` ranks, one placement-group bundle each (``placement_strategy``:
    ``PACK`` by default, ``SPREAD`` to use many nodes), or ``num_hosts`` distinct nodes
    with ``num_workers_per_host`` ranks each. Each rank reserves ``cpus_per_worker`` CPUs
    and, with ``use_gpu``, ``gpus_per_worker`` GPUs (default 1). Run inside a placement
    group (``use_current_placement_group``), the ranks use it instead of making one.
    With ``min_workers`` (and ``max_workers``, ``reset_limit``, ``cooldown_range``,
    ``elastic_timeout``) the job is elastic (:mod:`gcurun.ray.elastic_v2`): its workers
    are the slots discovery finds (``settings.discovery``, by default Ray's live nodes),
    and it re-forms from the last ``commit()`` when a worker or node dies or joins.

    Raises RayUsageError (also a ValueError) for arguments that make no job.
    """

    @classmethod
    def create_settings(cls, timeout_s: float = 30, ssh_identity_file: str | None = None,
                        ssh_str: str | None = None, placement_group_timeout_s: float = 100,
                        nics: set | None = None) -> MiniSettings:
        """Settings for :class:`RayExecutor`. ``ssh_str`` (a private key) is written to
        ``ssh_identity_file`` when that file does not exist yet, as Horovod does, though
        gcurun's Ray jobs do not use SSH."""
        if ssh_str:
            if not ssh_identity_file:
                raise RayUsageError("create_settings(ssh_str=...): give ssh_identity_file, "
                                    "the file to write the key to")
            if not os.path.exists(ssh_identity_file):
                descriptor = os.open(ssh_identity_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                                     0o600)
                with os.fdopen(descriptor, "w") as out:
                    out.write(ssh_str)
        return MiniSettings(ssh_identity_file=ssh_identity_file, timeout_s=timeout_s,
                            placement_group_timeout_s=placement_group_timeout_s, nics=nics)

    def __init__(self, settings: MiniSettings | None = None, num_workers: int | None = None,
                 num_hosts: int | None = None, num_workers_per_host: int | None = 1,
                 cpus_per_worker: float = 1, use_gpu: bool = False,
                 gpus_per_worker: float | None = None, use_current_placement_group: bool = True,
                 min_workers: int | None = None, max_workers: int | None = None,
                 reset_limit: int | None = None, cooldown_range: Sequence[int] | None = None,
                 elastic_timeout: int = 600, override_discovery: bool = True, *,
                 placement_strategy: PlacementStrategy = "PACK") -> None:
        from gcurun.ray.elastic_v2 import check_elastic

        elastic = check_elastic(num_workers, num_hosts, min_workers, max_workers, reset_limit,
                                cooldown_range, elastic_timeout, override_discovery,
                                cpus_per_worker, use_gpu, gpus_per_worker)
        self.params: StaticParams | ElasticParams = elastic or check_params(
            num_workers, num_hosts, num_workers_per_host, cpus_per_worker, use_gpu,
            gpus_per_worker, use_current_placement_group, placement_strategy)
        self.settings = settings if settings is not None else self.create_settings()
        self.settings.elastic = self.params.elastic
        self.adapter: Any = None
        self._is_remote = False

    def start(self, executable_cls: type | None = None,
              executable_args: Sequence[Any] | None = None,
              executable_kwargs: Mapping[str, Any] | None = None,
              extra_env_vars: Mapping[str, Any] | None = None) -> None:
        """Place and start the ranks, then create ``executable_cls(*args, **kwargs)`` in
        each (after its environment is set: it may call ``hvd.init()``);
        ``extra_env_vars`` are set on every rank too.

        Raises RayStartTimeout (a TimeoutError) when the resources or the actors are not
        ready in time, RayUsageError when ``extra_env_vars`` names a variable gcurun sets
        for each rank, and the executable's error (its rank named) when it raises;
        nothing of the job is left running after an error."""
        import ray

        if self.adapter is not None:
            raise ExecutorStateError("RayExecutor.start(): already started; call "
                                     "shutdown() first to start again")
        kwargs = asdict(self.params)
        adapter_cls: type = StaticAdapter
        if self.params.elastic:
            from gcurun.ray.elastic_v2 import ElasticAdapter

            adapter_cls = ElasticAdapter
        if ray.util.client.ray.is_connected():
            # A Ray client drives the job from an actor in the cluster: the rendezvous
            # must be served where the ranks can reach it.
            remote: Any = ray.remote(adapter_cls).options(num_cpus=0)
            self.adapter, self._is_remote = remote.remote(self.settings, **kwargs), True
        else:
            self.adapter, self._is_remote = adapter_cls(self.settings, **kwargs), False
        try:
            self._call("start", executable_cls=executable_cls,
                       executable_args=executable_args, executable_kwargs=executable_kwargs,
                       extra_env_vars=extra_env_vars)
        except BaseException:
            self.shutdown()
            raise

    def execute(self, fn: Callable[[Any], Any],
                callbacks: Sequence[Callable] | None = None) -> list[Any]:
        """``fn(executable)`` on every rank; the results in rank order. When ``fn``
        raises on a rank, that error is raised here (Ray's error, still an instance of
        the original type) with a note naming the rank; the job is aborted for every
        rank. ``callbacks`` are accepted for Horovod's signature and unused, as in
        Horovod's fixed-size executor."""
        return self._call("execute", fn=fn, callbacks=callbacks)

    def run(self, fn: Callable[..., Any], args: Sequence[Any] | None = None,
            kwargs: Mapping[str, Any] | None = None,
            callbacks: Sequence[Callable] | None = None) -> list[Any]:
        """``fn(*args, **kwargs)`` on every rank; the results in rank order (errors as
        for :meth:`execute`)."""
        return self._call("run", fn=fn, args=args, kwargs=kwargs, callbacks=callbacks)

    def run_remote(self, fn: Callable[..., Any], args: Sequence[Any] | None = None,
                   kwargs: Mapping[str, Any] | None = None) -> list[Any]:
        """Start ``fn(*args, **kwargs)`` on every rank; Ray object refs, in rank order,
        for ``ray.get``."""
        return self._call("run_remote", fn=fn, args=args, kwargs=kwargs)

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(executable)`` on rank 0 alone; its result."""
        return self._call("execute_single", fn=fn)

    def shutdown(self) -> None:
        """Kill every rank's actor, remove the job's placement group and stop its
        rendezvous. Idempotent; ``start()`` may follow."""
        adapter, self.adapter = self.adapter, None
        if adapter is None:
            return
        if not self._is_remote:
            adapter.shutdown()
            return
        import ray

        try:
            ray.get(adapter.shutdown.remote())
        finally:
            ray.kill(adapter)

    def _call(self, method: str, **kwargs: Any) -> Any:
        if self.adapter is None:
            raise ExecutorStateError(f"RayExecutor.{method}(): the executor is not running; "
                                     "call start() first")
        if self._is_remote:
            import ray

            return ray.get(getattr(self.adapter, method).remote(**kwargs))
        return getattr(self.adapter, method)(**kwargs)


class StaticAdapter:
    """The driver of a fixed-size job (in the caller's process, or in an actor when the
    caller is a Ray client). See :class:`RayExecutor`."""

    def __init__(self, settings: MiniSettings, num_workers: int | None = None,
                 num_hosts: int | None = None, num_workers_per_host: int = 1,
                 cpus_per_worker: float = 1, use_gpu: bool = False,
                 gpus_per_worker: float | None = None, use_current_placement_group: bool = True,
                 placement_strategy: PlacementStrategy = "PACK") -> None:
        self.settings = settings
        self.params = StaticParams(num_workers, num_hosts, num_workers_per_host,
                                   cpus_per_worker, use_gpu, gpus_per_worker,
                                   use_current_placement_group, placement_strategy)
        self.workers: list[Any] = []
        self.sites: list[WorkerSite] = []
        self.strategy: BaseStrategy | None = None
        self.coordinator = Coordinator(settings)
        self._local_processes: list[Any] = []

    def _create_strategy(self) -> BaseStrategy:
        from ray.util.placement_group import get_current_placement_group

        p = self.params
        inherit = p.use_current_placement_group and get_current_placement_group() is not None
        if p.num_workers is not None or inherit:
            count = p.num_workers or p.num_workers_per_host * (p.num_hosts or 1)
            return PGStrategy(settings=self.settings, num_workers=count,
                              use_gpu=p.use_gpu, cpus_per_worker=p.cpus_per_worker,
                              gpus_per_worker=p.gpus_per_worker,
                              force_create_placement_group=not p.use_current_placement_group,
                              placement_strategy=p.placement_strategy)
        assert p.num_hosts is not None
        return ColocatedStrategy(settings=self.settings, num_hosts=p.num_hosts,
                                 num_workers_per_host=p.num_workers_per_host, use_gpu=p.use_gpu,
                                 cpus_per_worker=p.cpus_per_worker,
                                 gpus_per_worker=p.gpus_per_worker)

    def start(self, executable_cls: type | None = None,
              executable_args: Sequence[Any] | None = None,
              executable_kwargs: Mapping[str, Any] | None = None,
              extra_env_vars: Mapping[str, Any] | None = None) -> None:
        device_var = GPU_DEVICE_VARIABLE if self.params.use_gpu else None
        extra = check_extra_env(extra_env_vars or {}, device_var)
        self.strategy = self._create_strategy()
        workers, _ = self.strategy.create_workers()
        timeout = float(self.settings.timeout_s)
        found = self._get([w.site.remote() for w in workers], timeout, "start")
        order = rank_order([node for node, _, _, _ in found])
        self.workers = [workers[i] for i in order]
        self.sites = [WorkerSite(found[i][0], found[i][1], tuple(found[i][2])) for i in order]
        self._watch_local([found[i][3] for i in order])
        for rank, site in enumerate(self.sites):
            self.coordinator.register(site.address, site.node_id, rank)
        master_port = self._get([self.workers[0].free_port.remote()], timeout, "start")[0]
        envs = _worker_environments(self.sites, master_port=master_port, device_var=device_var)
        shared = {TIMEOUT_VARIABLE: f"{timeout:g}"}
        if len(self.workers) > 1:
            shared.update(self.coordinator.establish_rendezvous())
        shared.update(extra)
        self._get([w.update_env_vars.remote({**env, **shared})
                   for w, env in zip(self.workers, envs, strict=True)], timeout, "start")
        self._gather([w.start_executable.remote(executable_cls, executable_args,
                                                executable_kwargs) for w in self.workers])
        log.info("Ray job of %d ranks on %d nodes started", len(self.workers),
                 len({s.node_id for s in self.sites}))

    def execute(self, fn: Callable[[Any], Any],
                callbacks: Sequence[Callable] | None = None) -> list[Any]:
        return self._gather(self._run_remote(fn))

    def run(self, fn: Callable[..., Any], args: Sequence[Any] | None = None,
            kwargs: Mapping[str, Any] | None = None,
            callbacks: Sequence[Callable] | None = None) -> list[Any]:
        return self._gather(self._run_remote(_Call(fn, args, kwargs)))

    def run_remote(self, fn: Callable[..., Any], args: Sequence[Any] | None = None,
                   kwargs: Mapping[str, Any] | None = None,
                   callbacks: Sequence[Callable] | None = None) -> list[Any]:
        return self._run_remote(_Call(fn, args, kwargs))

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        return self._gather([self.workers[0].execute.remote(fn)])[0]

    def _run_remote(self, fn: Callable[[Any], Any]) -> list[Any]:
        if not self.workers:
            raise ExecutorStateError("the executor has no workers: call start() first")
        return [worker.execute.remote(fn) for worker in self.workers]

    def shutdown(self) -> None:
        """Let the ranks leave the runtime (briefly), kill their actors, wait for those
        on this node to exit, remove the placement group, stop the rendezvous."""
        import ray

        workers, self.workers = self.workers, []
        try:
            if workers:
                ray.wait([w.leave_job.remote() for w in workers], num_returns=len(workers),
                         timeout=min(LEAVE_SECONDS, float(self.settings.timeout_s)))
            for worker in workers:
                ray.kill(worker, no_restart=True)
            self._reap_local()
        finally:
            if self.strategy is not None:
                self.strategy.shutdown()
            self.coordinator.close()

    # -- helpers --------------------------------------------------------------------------

    def _get(self, refs: list[Any], timeout: float, what: str) -> list[Any]:
        """``ray.get`` within ``timeout``; RayStartTimeout naming what did not finish."""
        import ray

        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        if pending:
            raise RayStartTimeout(
                f"{what}: {len(pending)} of {len(refs)} workers did not answer within "
                f"timeout_s={timeout:g} s (their actors could not start, or are busy); "
                "check the Ray cluster's state (ray status) or raise timeout_s")
        return list(ray.get(refs))

    def _gather(self, refs: Sequence[Any]) -> list[Any]:
        """The results of ``refs`` (one per rank, in rank order). When ranks fail, the
        root cause is raised: the first error that is not the runtime telling a rank
        that the job aborted because of another."""
        import ray

        pending = {ref: rank for rank, ref in enumerate(refs)}
        results: list[Any] = [None] * len(refs)
        errors: list[tuple[int, BaseException]] = []
        deadline: float | None = None
        while pending:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait)
            if not ready:
                break
            for ref in ready:
                rank = pending.pop(ref)
                try:
                    results[rank] = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - every rank's error is a candidate
                    errors.append((rank, exc))
                    if deadline is None:
                        deadline = time.monotonic() + ROOT_CAUSE_SECONDS
        if not errors:
            return results
        rank, error = next(((r, e) for r, e in errors if not _consequence(e)), errors[0])
        site = self.sites[rank] if rank < len(self.sites) else None
        where = f" on node {site.address}" if site is not None else ""
        others = sorted(r for r, _ in errors if r != rank)
        error.add_note(f"gcurun.ray: raised on rank {rank} of {len(refs)}{where}"
                       + (f"; ranks {others} failed after it" if others else ""))
        raise error

    def _watch_local(self, pids: Sequence[int]) -> None:
        """Remember the actors' processes on this node, to see them exit at shutdown."""
        import psutil
        import ray

        here = str(ray.get_runtime_context().get_node_id())
        self._local_processes = []
        for pid, site in zip(pids, self.sites, strict=True):
            if site.node_id == here:
                try:
                    self._local_processes.append(psutil.Process(pid))
                except psutil.NoSuchProcess:
                    pass

    def _reap_local(self) -> None:
        """Wait (EXIT_SECONDS at most) for the killed actors of this node to exit;
        SIGKILL any that did not."""
        import psutil

        processes, self._local_processes = self._local_processes, []
        _, alive = psutil.wait_procs(processes, timeout=EXIT_SECONDS)
        for process in alive:
            log.warning("actor process %d did not exit after ray.kill; killing it",
                        process.pid)
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=EXIT_SECONDS)


def _consequence(error: BaseException) -> bool:
    """Whether ``error`` is a rank learning that another rank failed (not a cause)."""
    cause = getattr(error, "cause", None)
    return isinstance(error, CollectiveError) or isinstance(cause, CollectiveError)
