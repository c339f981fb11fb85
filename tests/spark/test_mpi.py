"""``gcurun.spark.run(use_mpi=True)`` (gcurun/spark/_mpi.py, _rsh.py).

On the run's local-cluster session every executor runs on this host, which mpirun takes
for its own: it starts the ranks itself, without the rsh agent, but it is still a real
mpirun job whose ranks use the runtime's mpi backend. The agent, the relay and a daemon
inside a Spark task are exercised here without Spark (an agent served in this process,
the agent program as mpirun would run it) and across hosts in
tests/cluster/test_spark_cluster.py.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading

import pytest

from tests.helpers import survivors, wait_for
from tests.spark.test_run import _fail_on_rank_one

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _mpi_identity(lines):
    import gcurun.runtime as hvd

    hvd.init()
    import numpy as np

    total = hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum, name="sum")
    for i in range(lines):
        print(f"rank {hvd.rank()} line {i}")
    found = {"rank": hvd.rank(), "size": hvd.size(), "sum": float(total[0]),
             "backend": os.environ.get("OMPI_COMM_WORLD_RANK") is not None,
             "env": os.environ.get("FROM_ENV"), "pid": os.getpid()}
    hvd.shutdown()
    return found


def test_use_mpi_runs_the_ranks_under_mpirun_results_in_rank_order(spark):
    import gcurun.spark

    out = io.StringIO()
    found = gcurun.spark.run(_mpi_identity, args=(3,), num_proc=2, use_mpi=True,
                             env={"FROM_ENV": "1"}, start_timeout=120, verbose=0, stdout=out)
    assert [(f["rank"], f["size"], f["sum"]) for f in found] == [(0, 2, 3.0), (1, 2, 3.0)]
    assert all(f["backend"] and f["env"] == "1" for f in found)   # started by mpirun
    lines = out.getvalue().splitlines()
    for rank in (0, 1):
        assert [line for line in lines if line.startswith(f"[{rank}] ")] == \
            [f"[{rank}] rank {rank} line {i}" for i in range(3)]
    assert survivors([f["pid"] for f in found]) == []


def test_use_mpi_raises_a_ranks_exception_with_its_rank_and_traceback(spark):
    import gcurun.spark
    from gcurun.errors import RankFunctionError

    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(RankFunctionError) as caught:
        gcurun.spark.run(_fail_on_rank_one, args=(7,), num_proc=2, use_mpi=True,
                         start_timeout=120, verbose=0, stdout=out, stderr=err)
    assert "[1] rank 1 gives up\n" in out.getvalue()
    error = caught.value
    assert (error.rank, error.error_type, error.message) == (1, "ValueError", "bad value 7")
    assert "in _fail_on_rank_one" in error.remote_traceback


@pytest.fixture
def relay():
    """A driver's agent service and relay, and one agent (a Spark task's, served in a
    thread of this process) registered as host ``node-a``."""
    from gcurun.rendezvous.wire import new_secret
    from gcurun.spark._mpi import DaemonRelay
    from gcurun.spark.agent import Agent, AgentJob, connect
    from gcurun.spark.elastic import AgentService

    secret = new_secret()
    service = AgentService("127.0.0.1", secret)
    daemons = DaemonRelay(service)
    service.start()
    job = AgentJob(service.address, secret.hex(), {})
    sock = connect(job)
    agent = Agent(job, sock)
    agent.send({"op": "agent", "host": "node-a", "executor": os.getpid(), "partition": 0,
                "attempt": 0})
    serving = threading.Thread(target=agent.serve, daemon=True)
    serving.start()
    wait_for("the agent registered", lambda: service.connected() == 1)
    env = {**os.environ, "PYTHONPATH": ROOT,
           "GCURUN_SPARK_DAEMONS": f"127.0.0.1:{service.address[1]}",
           "GCURUN_FUNCTION_SECRET": secret.hex()}
    yield daemons, agent, env
    service.close()
    serving.join(30)
    sock.close()


def _rsh(env, *args, timeout=60):
    return subprocess.run([sys.executable, "-m", "gcurun.spark._rsh", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_rsh_agent_runs_the_command_in_the_hosts_task_with_its_output_and_status(relay):
    daemons, agent, env = relay
    done = _rsh(env, "-x", "node-a", "echo", "daemon on $0;", "echo", "oops", ">&2;",
                "exit", "3")
    assert (done.returncode, done.stdout, done.stderr) == (3, "daemon on /bin/sh\n", "oops\n")
    assert list(daemons.launched.values()) == ["node-a"]
    assert agent.workers == {} or all(p.poll() is not None for p in agent.workers.values())


def test_the_rsh_agent_for_a_host_without_a_task_exits_255_saying_so(relay):
    _, _, env = relay
    done = _rsh(env, "node-b", "true")
    assert done.returncode == 255
    assert done.stderr == "gcurun.spark: node-b: no Spark task of this job runs on node-b\n"


def test_ending_the_rsh_agent_stops_its_daemon_in_the_task(relay, tmp_path):
    _, agent, env = relay
    pid_file = tmp_path / "pid"
    process = subprocess.Popen(
        [sys.executable, "-m", "gcurun.spark._rsh", "node-a", f"echo $$ > {pid_file};",
         "exec", "sleep", "600"], env=env)
    try:
        wait_for("the daemon started", lambda: pid_file.exists() and
                 pid_file.read_text().strip() != "")
        daemon = int(pid_file.read_text())
        process.terminate()            # what mpirun does to its agents at the end
        assert process.wait(30) == 128 + 15
        assert survivors([daemon], timeout=30) == []
    finally:
        process.kill()
        process.wait()


@pytest.mark.long
def test_a_use_mpi_job_cancelled_from_spark_stops_mpirun_and_its_ranks(spark, tmp_path):
    from gcurun.spark import SparkJobFailed
    from tests.spark.test_run import _run_in_thread, _starts

    thread, outcome = _run_in_thread(args=(str(tmp_path),), num_proc=2, use_mpi=True)
    wait_for("both ranks to start", lambda: len(_starts(tmp_path)) == 2, timeout=120)
    spark.sparkContext.cancelAllJobs()
    thread.join(120)
    assert isinstance(outcome.get("error"), SparkJobFailed), outcome
    assert survivors([pid for _, pid, _ in _starts(tmp_path)], timeout=60) == []


@pytest.mark.long
def test_ranks_that_never_start_end_the_job_at_start_timeout(spark, tmp_path):
    # The ranks' program never fetches its function (as when an MPI daemon does not come
    # up): mpirun itself would wait for ever; start_timeout after its start, the job ends,
    # naming the ranks, and nothing of it is left.
    import gcurun.spark
    from gcurun.errors import GcurunError

    stuck = tmp_path / "python"
    stuck.write_text("#!/bin/sh\necho $$ >> \"$0.pids\"\nexec sleep 600\n")
    stuck.chmod(0o755)
    with pytest.raises(GcurunError) as caught:
        gcurun.spark.run(_fail_on_rank_one, args=(7,), num_proc=2, use_mpi=True,
                         start_timeout=30, verbose=0, executable=str(stuck),
                         stdout=io.StringIO(), stderr=io.StringIO())
    assert "did not start within start_timeout=30 s of mpirun's start" in str(caught.value)
    pids = [int(p) for p in (tmp_path / "python.pids").read_text().split()]
    assert len(pids) == 2 and survivors(pids, timeout=60) == []
