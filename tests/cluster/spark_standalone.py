"""A Spark standalone cluster on namespace hosts: a master on h1 and a worker (one core)
on every host, each JVM bound to its host's bridge address, started with the
``spark-class`` that the pyspark package ships. Jobs are driven from h1 by a driver
script (``spark_driver.py``, ``spark_estimator_driver.py``) in a process of its own (one
SparkContext per process), which runs its job through :func:`run_driver`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.cluster.netns import NetnsCluster, NetnsHost, processes_in

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("spark_driver.py")
ESTIMATOR_DRIVER = Path(__file__).with_name("spark_estimator_driver.py")
MASTER_PORT = 7077
WORKER_CORES = 1
EXIT_SECONDS = 60.0
# What marks a process of the Spark cluster or of a job on a host.
MARKS = ("org.apache.spark", "pyspark", "gcurun.launch.remote.run_function")


@dataclass
class SparkStandalone:
    cluster: NetnsCluster
    work: Path
    processes: list[subprocess.Popen]

    @property
    def master_url(self) -> str:
        return f"spark://{self.cluster.hosts[0].address}:{MASTER_PORT}"


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def _environment(host: NetnsHost, work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(SPARK_HOME=spark_home(), SPARK_LOCAL_IP=host.address,
               SPARK_LOCAL_HOSTNAME=host.address, SPARK_WORKER_DIR=str(work / host.name),
               SPARK_LOG_DIR=str(work / "logs"), PYTHONPATH=str(REPO),
               SPARK_NO_DAEMONIZE="1",
               SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    return env


def _in_host(host: NetnsHost, argv: list[str], work: Path, log: str) -> subprocess.Popen:
    out = open(work / log, "ab")  # noqa: SIM115 - the child keeps it
    return subprocess.Popen(["ip", "netns", "exec", host.netns, *argv], stdout=out,
                            stderr=subprocess.STDOUT, env=_environment(host, work),
                            start_new_session=True)


def start_standalone(cluster: NetnsCluster, work: Path, timeout: float = 240.0) \
        -> SparkStandalone:
    """The master on h1 and a worker on every host; returns once every worker has
    registered with the master (its log says so)."""
    work.mkdir(parents=True, exist_ok=True)
    spark_class = os.path.join(spark_home(), "bin", "spark-class")
    h1 = cluster.hosts[0]
    running = SparkStandalone(cluster, work, [])
    running.processes.append(_in_host(h1, [
        spark_class, "org.apache.spark.deploy.master.Master", "--host", h1.address,
        "--port", str(MASTER_PORT), "--webui-port", "8080"], work, "master.log"))
    for host in cluster.hosts:
        running.processes.append(_in_host(host, [
            spark_class, "org.apache.spark.deploy.worker.Worker", running.master_url,
            "--host", host.address, "--cores", str(WORKER_CORES), "--memory", "1g",
            "--webui-port", "8081", "--work-dir", str(work / host.name)],
            work, f"worker-{host.name}.log"))
    deadline = time.monotonic() + timeout
    log = work / "master.log"
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        if text.count("Registering worker") >= len(cluster.hosts):
            return running
        if time.monotonic() > deadline or any(p.poll() is not None for p in running.processes):
            stop_standalone(running)
            raise RuntimeError(f"the Spark standalone cluster did not come up within "
                               f"{timeout:g} s; master log:\n{text[-3000:]}")
        time.sleep(0.2)


def stop_standalone(running: SparkStandalone) -> dict[str, list[int]]:
    """Stop the master and the workers (and so their executors); the pids of Spark or
    job processes still alive on each host afterwards (none, when all went well)."""
    for process in running.processes:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for process in running.processes:
        try:
            process.wait(EXIT_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return left_on_hosts(running.cluster)


def left_on_hosts(cluster: NetnsCluster, timeout: float = EXIT_SECONDS,
                  marks: tuple[str, ...] = MARKS) -> dict[str, list[int]]:
    """Processes whose command line holds one of ``marks`` (default: Spark's and the
    jobs') still alive on each host after ``timeout`` (empty lists when none are)."""
    deadline = time.monotonic() + timeout
    while True:
        left = {h.name: processes_in(h, *marks) for h in cluster.hosts}
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def drive(running: SparkStandalone, script: Path, spec: dict,
          timeout: float = 600.0) -> dict:
    """Run the driver ``script`` (one that calls :func:`run_driver`) with ``spec`` on h1;
    its JSON outcome."""
    h1 = running.cluster.hosts[0]
    spec = {**spec, "master": running.master_url, "driver_host": h1.address}
    path = running.work / "spec.json"
    path.write_text(json.dumps(spec))
    done = subprocess.run(["ip", "netns", "exec", h1.netns, sys.executable, str(script),
                           str(path)], capture_output=True, text=True, timeout=timeout,
                          env=_environment(h1, running.work))
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise AssertionError(f"the Spark driver printed no result (exit {done.returncode})"
                             f":\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def run_driver(app_name: str, job: Callable[[Any, dict], Any]) -> None:
    """The body of a driver script: read the spec (the file named by the first argument),
    open a session on the spec's master with the driver on ``driver_host``, print
    ``RESULT`` and the JSON of ``job(session, spec)`` (``{"error": ...}`` when it
    raised), and stop the session (and so its executors)."""
    from pyspark.sql import SparkSession

    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    session = (SparkSession.builder.master(spec["master"]).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.driver.host", spec["driver_host"])
               .config("spark.driver.bindAddress", spec["driver_host"])
               .config("spark.executor.memory", "512m")
               .config("spark.executor.cores", "1")
               .config("spark.cores.max", str(spec.get("cores", spec.get("num_proc", 3))))
               .config("spark.python.task.killTimeout", "1s")
               .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
               .config("spark.executor.extraJavaOptions", "-XX:TieredStopAtLevel=1")
               .getOrCreate())
    try:
        try:
            outcome = job(session, spec)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            outcome = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        session.stop()
    print("RESULT " + json.dumps(outcome), flush=True)
