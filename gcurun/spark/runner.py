"""``gcurun.spark.run``: Horovod's ``horovod.spark.run`` on gcurun.

One rank per task of a Spark barrier stage (the tasks start together or not at all).
The driver serves the pickled function (:mod:`gcurun.launch.function_service`, as
:func:`gcurun.run` does) and the ranks' rendezvous (the tcp runtime), both authenticated
with the job's secret; each task works out its rank from where the stage's tasks run and
starts it as a child process (:mod:`gcurun.spark.task`). The service serves each rank
once, so a task Spark retries, or a speculative copy, never runs a rank twice.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from gcurun.launch.function_service import FunctionService
from gcurun.launch.supervision.output import OutputSink
from gcurun.spark._job import (
    END_SECONDS,
    SparkJob,
    check_num_proc,
    check_timeout,
    driver_address,
    function_error,
    network_environment,
)
from gcurun.spark._output import OutputService
from gcurun.spark.api import SparkJobFailed, SparkStartTimeout, SparkUsageError
from gcurun.spark.task import TaskJob, run_task

log = logging.getLogger("gcurun.spark")

TIMEOUT_VARIABLE = "GCURUN_TIMEOUT_SECONDS"
# How often the driver looks at the Spark job while it waits for the ranks.
POLL_SECONDS = 0.5
USE_BOTH_REFUSED = ("gcurun.spark.run(use_mpi=True, use_gloo=True): the two exclude each "
                    "other; give one (use_gloo: gcurun's tcp runtime, use_mpi: mpirun)")
# How long the driver waits for the last output of the ranks of a job that failed (the
# ranks that ended, then those of the cancelled tasks).
OUTPUT_SECONDS = 10.0


def run(fn: Callable[..., Any], args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None, num_proc: int | None = None,
        start_timeout: float | None = None, use_mpi: bool | None = None,
        use_gloo: bool | None = None, extra_mpi_args: str | None = None,
        env: Mapping[str, str] | None = None, stdout: Any = None, stderr: Any = None,
        verbose: int = 1, nics: Any = None, prefix_output_with_timestamp: bool = False,
        executable: str | None = None) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on ``num_proc`` ranks, one per task of a Spark barrier
    stage of the active session (default: the session's default parallelism); the list
    of its results, in rank order.

    Ranks are numbered executor host by executor host (LOCAL_RANK counts a host's ranks;
    the accelerator's device variable lists their devices: those Spark gave each task,
    else local ranks). Each rank is a process started by its task with the executor's
    environment, gcurun's rank variables and ``env`` (never the driver's environment),
    run by ``executable`` (default: the executor's Python). ``fn`` joins the job with
    ``hvd.init()`` (the tcp runtime, through the driver's rendezvous).

    ``start_timeout`` (default 600 s, or HOROVOD_SPARK_START_TIMEOUT) bounds the start
    of every rank: a barrier stage waits for ``num_proc`` free task slots at once.
    ``nics`` (an interface name or CIDR) is the network the ranks' tcp runtime uses.
    ``use_gloo`` (the default) is gcurun's tcp runtime; ``use_mpi=True`` starts the
    ranks with mpirun on the driver (Open MPI), whose daemons run inside the stage's
    tasks (Open MPI's rsh agent asks each host's task to start its daemon), with
    ``extra_mpi_args`` added to mpirun's; the ranks then use the runtime's mpi backend
    (see docs/spark.md). Every line a rank
    writes reaches ``stdout`` / ``stderr`` (file objects; default: the driver's
    sys.stdout / sys.stderr) with the rank's prefix, as gcurun's launcher shows it
    (``[1] text``), after the time the driver got it when
    ``prefix_output_with_timestamp``; all of it before ``run`` returns or raises.

    Raises RankFunctionError (rank, host and traceback) when ``fn`` raised on a rank,
    SparkStartTimeout when not every rank started in time, SparkJobFailed when the Spark
    job ended (an executor lost, a rank's process killed, the job cancelled) before every
    rank returned, SparkUsageError for arguments that make no job. In every case the
    Spark job is over and no rank is left running when it returns or raises.
    """
    from pyspark import SparkContext

    from gcurun.launch.remote.run_function import pack_call

    if use_mpi and use_gloo:
        raise SparkUsageError(USE_BOTH_REFUSED)
    context = SparkContext._active_spark_context
    if context is None:
        raise SparkUsageError("gcurun.spark.run: no active Spark session; create one "
                              "(SparkSession.builder.getOrCreate()) before running a job")
    size = check_num_proc(num_proc, context.defaultParallelism)
    timeout = check_timeout(start_timeout)
    try:
        payload = pack_call(functools.partial(fn, *args, **dict(kwargs or {})))
    except Exception as exc:
        raise SparkUsageError(f"gcurun.spark.run: the function or its arguments cannot be "
                              f"pickled ({type(exc).__name__}: {exc}); pass picklable "
                              "values") from None
    host = driver_address(context)
    if verbose:
        sys.stderr.write(f"gcurun.spark.run: {size} ranks in a barrier stage"
                         f"{', started by mpirun' if use_mpi else ''}; driver services "
                         f"on {host}\n")
    sink = OutputSink(stdout or sys.stdout, stderr or sys.stderr,
                      timestamps=bool(prefix_output_with_timestamp))
    if use_mpi:
        from gcurun.spark._mpi import run_mpi

        network = network_environment(nics)
        return run_mpi(context, payload, size, host, timeout, dict(env or {}), executable,
                       sink, extra_mpi_args, next(iter(network.values()), None))
    return _run(context, payload, size, host, timeout,
                {**network_environment(nics), **dict(env or {})}, executable, sink)


def device_settings() -> tuple[str | None, tuple[str, ...]]:
    """The accelerator's device variable (gcurun's settings: GCURUN_ACCELERATOR, the
    profile) and the Spark resources that name a task's devices."""
    from gcurun.config.api import DEVICE_VARIABLES
    from gcurun.config.resolve import load_settings

    accelerator = load_settings({}, None, os.environ).accelerator
    return DEVICE_VARIABLES.get(accelerator), ("gpu", accelerator)


def _run(context: Any, payload: bytes, size: int, host: str, timeout: float,
         env: Mapping[str, str] | None, executable: str | None,
         sink: OutputSink) -> list[Any]:
    from gcurun.launch.remote.rank_env import RENDEZVOUS_VARIABLE, SECRET_VARIABLE
    from gcurun.rendezvous.server import RendezvousServer, new_secret
    from gcurun.rendezvous.wire import show_address

    secret = new_secret()
    service = FunctionService(payload, size, secret, host)
    output = OutputService(host, secret, sink)
    rendezvous: RendezvousServer | None = None
    job: SparkJob | None = None
    try:
        service.start()
        output.start()
        shared = {TIMEOUT_VARIABLE: f"{timeout:g}",
                  **{str(k): str(v) for k, v in dict(env or {}).items()}}
        joins: dict[str, str] = {}
        if size > 1:
            rendezvous = RendezvousServer(host, 0, secret=secret, size=size)
            rendezvous.start()
            joins = {RENDEZVOUS_VARIABLE: show_address(rendezvous.address),
                     SECRET_VARIABLE: secret.hex()}
        device_var, resources = device_settings()
        job = SparkJob(size, functools.partial(run_task, TaskJob(
            service=show_address((host, service.port)), secret=secret.hex(),
            output=output.address, shared=shared, secrets=joins, device_var=device_var,
            resources=resources, executable=executable)))
        job.start(context)
        return _wait(service, job, context, size, timeout)
    finally:
        # The output of the ranks that are done (what a failed rank wrote too) before
        # the stage is cancelled; then whatever the cancelled tasks still sent.
        over = (lambda: True) if job is None else job.done.is_set
        done = list(service.outcomes)
        output.wait_ended(done, END_SECONDS if len(done) == size else OUTPUT_SECONDS, over)
        if job is not None:
            job.cancel(context)
        output.wait_ended(range(size), OUTPUT_SECONDS, over)
        service.close()
        output.close()
        if rendezvous is not None:
            rendezvous.close()
        sink.finish_all()


def _wait(service: FunctionService, job: SparkJob, context: Any, size: int,
          timeout: float) -> list[Any]:
    """The results, in rank order, once every rank returned; else the job's error."""
    deadline = time.monotonic() + timeout

    def settled(s: FunctionService) -> bool:
        return (len(s.outcomes) == size or any(not o.ok for o in s.outcomes.values())
                or bool(s.dropped) or job.done.is_set()
                or (len(s.started) < size and time.monotonic() >= deadline))

    while not service.wait_until(settled, POLL_SECONDS):
        pass
    outcomes = dict(service.outcomes)
    failed = [(rank, o) for rank, o in outcomes.items() if not o.ok]
    if failed:
        raise function_error(failed, service.hosts)
    if len(outcomes) == size:
        job.done.wait(END_SECONDS)
        return [pickle.loads(outcomes[rank].data) for rank in range(size)]
    if len(service.started) < size and not job.done.is_set() and not service.dropped:
        raise SparkStartTimeout(
            f"gcurun.spark.run: {len(service.started)} of {size} ranks started within "
            f"start_timeout={timeout:g} s; a barrier stage needs {size} free task slots at "
            f"once (the session's default parallelism is {context.defaultParallelism}): "
            "give fewer ranks (num_proc), more executors or cores, or a longer "
            "start_timeout")
    raise lost_error(service, job, size)


def lost_error(service: FunctionService, job: SparkJob, size: int) -> SparkJobFailed:
    """Why the job ended without every rank's result."""
    missing = [r for r in range(size) if r not in service.outcomes]
    lost = sorted(service.dropped)
    if lost:
        where = ", ".join(f"rank {r} on {service.hosts.get(r, '?')}" for r in lost)
        return SparkJobFailed(f"gcurun.spark.run: {where} ended without returning a result "
                              "(its process or its executor was lost); the job was "
                              "cancelled")
    if job.error is not None:
        first = str(job.error).strip().splitlines()[:3]
        return SparkJobFailed(f"gcurun.spark.run: the Spark job ended before ranks {missing} "
                              f"returned: {type(job.error).__name__}: {' '.join(first)}")
    return SparkJobFailed(f"gcurun.spark.run: the Spark job ended before ranks {missing} "
                          "returned a result (did the function end its process?)")
