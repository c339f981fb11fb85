"""What ``gcurun.spark.run``, ``run_elastic`` and ``run(use_mpi=True)`` share: the Spark job
of a stage's tasks, the checks of their arguments, the driver's address and the root cause
among the ranks' errors."""

from __future__ import annotations

import logging
import os
import pickle
import secrets as _secrets
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gcurun.errors import RankFailure, RankFunctionError
from gcurun.launch.function_service import Outcome
from gcurun.spark.api import SparkUsageError
from gcurun.spark.task import TaskResult

log = logging.getLogger("gcurun.spark")

DEFAULT_START_TIMEOUT = 600.0
START_TIMEOUT_VARIABLE = "HOROVOD_SPARK_START_TIMEOUT"
# How long the Spark job may take to end once every rank returned, or once cancelled.
END_SECONDS = 60.0
# Errors a rank raises because another rank failed: never the root cause.
CONSEQUENCES = frozenset({"CollectiveError", "PeerFailureError", "CollectiveTimeout"})


@dataclass
class SparkJob:
    """The stage of one job's tasks (a barrier stage unless ``barrier`` is False), run
    in a thread of the driver (a Spark action blocks) under a job group of its own, so
    it can be cancelled."""

    size: int
    task: Callable[[Any], Any]          # a partition's body (run_task, run_agent)
    barrier: bool = True
    group: str = field(default_factory=lambda: f"gcurun-{_secrets.token_hex(6)}")
    results: list[TaskResult] | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self, context: Any) -> None:
        from pyspark import InheritableThread

        def body() -> None:
            try:
                context.setJobGroup(self.group, f"gcurun: {self.size} ranks",
                                    interruptOnCancel=True)
                rdd = context.parallelize(range(self.size), self.size)
                stage = rdd.barrier() if self.barrier else rdd
                self.results = stage.mapPartitions(self.task).collect()
            except BaseException as exc:  # noqa: BLE001 - reported by the driver
                self.error = exc
            finally:
                self.done.set()

        self._thread = InheritableThread(target=body, name="gcurun-spark-job", daemon=True)
        self._thread.start()

    def cancel(self, context: Any) -> None:
        """Cancel the stage (Spark kills its tasks' workers, and with them the ranks) and
        wait for the action to end, END_SECONDS at most."""
        if not self.done.is_set():
            context.cancelJobGroup(self.group)
        if not self.done.wait(END_SECONDS):
            log.warning("the Spark job %s did not end %g s after it was cancelled",
                        self.group, END_SECONDS)


def check_num_proc(num_proc: int | None, default: int) -> int:
    if num_proc is None:
        return max(1, int(default))
    if isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise SparkUsageError(f"gcurun.spark.run(num_proc={num_proc!r}): num_proc must be "
                              "a whole number of at least 1 (one rank per Spark task)")
    return num_proc


def network_environment(nics: Any) -> dict[str, str]:
    """The variable that keeps the tcp runtime on the network ``nics`` names (an
    interface name or a CIDR, or a set of one); none for None. Raises SparkUsageError
    for several: gcurun's ranks use one network."""
    if not nics:
        return {}
    from gcurun.launch.mpi.command import parse_network_interface
    from gcurun.launch.prepare import NETWORK_INTERFACE_VARIABLE

    given = [nics] if isinstance(nics, str) else sorted(str(n) for n in nics)
    if len(given) != 1:
        raise SparkUsageError(f"nics={nics!r}: gcurun's ranks use one network; give one "
                              "interface name (eth0) or a CIDR (10.0.0.0/24)")
    parse_network_interface(given[0])
    return {NETWORK_INTERFACE_VARIABLE: given[0]}


def check_timeout(start_timeout: float | None) -> float:
    if start_timeout is None:
        shown = os.environ.get(START_TIMEOUT_VARIABLE)
        if not shown:
            return DEFAULT_START_TIMEOUT
        try:
            start_timeout = float(shown)
        except ValueError:
            raise SparkUsageError(f"{START_TIMEOUT_VARIABLE}={shown!r}: give seconds above "
                                  "0") from None
    if not start_timeout > 0:
        raise SparkUsageError(f"gcurun.spark.run(start_timeout={start_timeout!r}): give "
                              "seconds above 0")
    return float(start_timeout)


def driver_address(context: Any) -> str:
    """The address executors reach this driver at (``spark.driver.host``, resolved)."""
    name = context.getConf().get("spark.driver.host") or socket.gethostname()
    try:
        return socket.gethostbyname(name)
    except OSError:
        return str(name)


def function_error(failed: list[tuple[int, Outcome]], hosts: Mapping[int, str]) \
        -> RankFunctionError:
    """The root cause among the ranks whose function raised (in the order their errors
    arrived): the first that is not a rank learning that another failed."""
    reports = [(rank, pickle.loads(o.data)) for rank, o in failed]
    rank, report = next(((r, rep) for r, rep in reports if rep["type"] not in CONSEQUENCES),
                        reports[0])
    error = RankFunctionError(RankFailure(rank, hosts.get(rank, "?"), exit_code=1),
                              report["type"], report["message"], report["traceback"])
    if "exception" in report:
        error.__cause__ = pickle.loads(report["exception"])
    return error
