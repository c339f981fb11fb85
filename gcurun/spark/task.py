"""What a Spark barrier task does for a gcurun job (Horovod's ``horovod.spark.task``):
it learns where every task of its stage runs, works out its rank, and runs that rank as
a child process, ``python -m gcurun.launch.remote.run_function``, which fetches the
function from the driver's service, calls it and sends back its result. The rank's
stdout and stderr are pipes the task forwards to the driver (:mod:`gcurun.spark._output`).

The rank is a child, not the Python worker itself: its environment (rank variables,
device variable, rendezvous) is its own from its first instruction, and nothing it
imports stays in a worker Spark reuses. It runs in its own session and gets SIGKILL when
the task's worker dies (Linux's parent-death signal): Spark kills the worker of a
cancelled task, so a cancelled job leaves no rank behind.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from gcurun.launch.remote import run_function as rank_side
from gcurun.launch.remote.session_guard import death_signal_setter
from gcurun.launch.remote.spawning import merged_environment
from gcurun.spark._layout import TaskReport, host_of, task_environment
from gcurun.spark._output import OutputChannel, drain, pump
from gcurun.spark.agent import executor_pid, watch_executor


@dataclass(frozen=True)
class TaskJob:
    """Everything a barrier task needs to start its rank (shipped in the task's closure)."""

    service: str                        # the driver's function service, host:port
    secret: str                         # the job's secret, hex
    output: tuple[str, int] | None = None   # the driver's output service
    shared: Mapping[str, str] = field(default_factory=dict)   # every rank's variables
    secrets: Mapping[str, str] = field(default_factory=dict)  # rendezvous and secret
    device_var: str | None = None
    resources: tuple[str, ...] = ()     # Spark resources naming a task's devices
    executable: str | None = None


@dataclass(frozen=True)
class TaskResult:
    """How one task's rank ended: its exit code (negative: the signal that killed it)."""

    partition: int
    rank: int
    host: str
    returncode: int
    pid: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def own_devices(context: object, resources: Iterable[str]) -> tuple[str, ...]:
    """The addresses of the first of ``resources`` Spark assigned this task (none:
    empty)."""
    assigned = context.resources()  # type: ignore[attr-defined]
    for name in resources:
        if name in assigned and assigned[name].addresses:
            return tuple(assigned[name].addresses)
    return ()


def run_task(job: TaskJob, _rows: Iterable[object]) -> Iterator[TaskResult]:
    """The body of each barrier task: start this task's rank and wait for it."""
    from pyspark import BarrierTaskContext

    context = BarrierTaskContext.get()
    partition = context.partitionId()
    hosts = [host_of(info.address) for info in context.getTaskInfos()]
    mine = TaskReport(own_devices(context, job.resources), free_port())
    reports = [TaskReport(tuple(r["devices"]), int(r["port"]))
               for r in map(json.loads, context.allGather(json.dumps(
                   {"devices": list(mine.devices), "port": mine.port})))]
    identity = task_environment(hosts, reports, partition, job.device_var)
    secrets = {**job.secrets, rank_side.ADDRESS_VARIABLE: job.service,
               rank_side.SECRET_VARIABLE: job.secret}
    env = merged_environment(os.environ, identity, secrets, shared=job.shared)
    rank = int(identity["GCURUN_RANK"])
    channel = OutputChannel(job.output, bytes.fromhex(job.secret), rank) \
        if job.output is not None else None
    piped = subprocess.PIPE if channel is not None else None
    process = subprocess.Popen(
        [job.executable or sys.executable, "-m", rank_side.__name__], env=env,
        stdin=subprocess.DEVNULL, stdout=piped, stderr=piped, start_new_session=True,
        preexec_fn=death_signal_setter(signal.SIGKILL))
    pumps = pump([("stdout", process.stdout), ("stderr", process.stderr)],
                 channel.send) if channel is not None else []
    stop = threading.Event()
    # A rank must not outlive its executor (Spark may not have stopped its Python
    # workers yet when the executor is gone).
    watch_executor(executor_pid(), process.kill, stop)
    try:
        returncode = process.wait()
    finally:
        stop.set()
        if process.poll() is None:   # this task is being stopped: its rank goes first
            process.kill()
            process.wait()
        drain(pumps)      # the rank's last words reach the driver before the task ends
        if channel is not None:
            channel.close()
    yield TaskResult(partition, rank, hosts[partition], returncode, process.pid)
