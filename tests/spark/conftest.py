"""One Spark session for every Spark test of a run: ``local-cluster[2,1,1024]`` (a master
and two workers of one core each inside the driver's JVM, each executor its own JVM), so
a job's ranks run in two executors as on a real cluster. Spark starts slowly: the session
is made once, on first use, and stopped at the end of the run, when every process it
started (the JVMs, Python workers and ranks) must be gone.

Tests that need a Spark session take the ``spark`` fixture; they are skipped, with the
reason, where pyspark or Java is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[2])
# How long the session's processes may take to exit once it is stopped.
EXIT_SECONDS = 60.0
MASTER = "local-cluster[2,1,1024]"
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_conf(builder, master: str = MASTER):
    """The settings every test session uses: small, quiet, on loopback."""
    return (builder.master(master)
            .appName("gcurun-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.executor.memory", "512m")
            .config("spark.executor.cores", "1")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.task.maxFailures", "4")
            .config("spark.python.task.killTimeout", "1s")
            .config("spark.executorEnv.PYTHONPATH", ROOT)
            # Start-up is class loading: the quick compiler only, on busy CI machines.
            .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
            .config("spark.executor.extraJavaOptions", JVM_OPTIONS)
            .config("spark.executorEnv.SPARK_LOCAL_IP", "127.0.0.1"))


def _require_spark() -> None:
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java: install openjdk-17-jre-headless")


def stop_session(session) -> list:
    """Stop ``session`` and its JVM (the py4j gateway Spark started for this process),
    so a later session starts afresh; the processes it had started that are still alive
    after EXIT_SECONDS."""
    import psutil
    from pyspark import SparkContext

    # Spark's processes: its JVM and what that started (executors, their Python workers,
    # the ranks); not this process's other children (a Ray cluster of the same run).
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None) if gateway is not None else None
    started = []
    if process is not None:
        jvm = psutil.Process(process.pid)
        started = [jvm, *jvm.children(recursive=True)]
    session.stop()
    if gateway is not None:
        gateway.shutdown()
        if process is not None:
            process.stdin.close()      # the JVM exits when its stdin closes
            try:
                process.wait(EXIT_SECONDS)
            except Exception:          # noqa: BLE001 - reported below as a survivor
                pass
        SparkContext._gateway = None
        SparkContext._jvm = None
    _, alive = psutil.wait_procs(started, timeout=EXIT_SECONDS)
    return alive


@pytest.fixture(scope="session")
def spark(tmp_path_factory) -> Iterator:
    """The run's Spark session (``local-cluster[2,1,1024]``), both executors up."""
    _require_spark()
    from pyspark.sql import SparkSession

    # The workers' directories (executor logs) go to the run's temporary directory,
    # not into the pyspark package.
    os.environ["SPARK_WORKER_DIR"] = str(tmp_path_factory.mktemp("spark-work"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    session = spark_conf(SparkSession.builder).getOrCreate()
    wait_for_executors(session, 2)
    yield session
    alive = stop_session(session)
    for process in alive:
        process.kill()
    assert not alive, f"processes of the Spark session outlived it: {alive}"


def wait_for_executors(session, count: int, timeout: float = 120.0) -> None:
    """Wait until ``count`` executors have registered (Spark starts them lazily)."""
    import time

    status = session.sparkContext._jsc.sc().getExecutorMemoryStatus
    deadline = time.monotonic() + timeout
    while status().size() < count + 1:   # the driver counts as one
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} executors did not register within {timeout:g} s")
        time.sleep(0.2)
