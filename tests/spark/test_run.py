"""gcurun.spark.run on the run's local-cluster session (tests/spark/conftest.py): two
executors of one core each on this host, so a job of 2 ranks fills the cluster. The
driver's interrupt and a retried task are ``long`` (the default run keeps the cancelled
job, which stops ranks the same way)."""

from __future__ import annotations

import io
import os
import re
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import survivors, wait_for


def _identity_and_sum():
    import gcurun.runtime as hvd

    hvd.init()
    import numpy as np

    total = hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum, name="sum")
    found = {name: os.environ.get(name) for name in (
        "GCURUN_RANK", "GCURUN_SIZE", "GCURUN_LOCAL_RANK", "GCURUN_LOCAL_SIZE",
        "GCURUN_CROSS_RANK", "GCURUN_HOSTNAME", "TOPS_VISIBLE_DEVICES", "GCURUN_DEVICE",
        "FROM_ENV", "DRIVER_ONLY")}
    hvd.shutdown()
    return found | {"sum": float(total[0]), "pid": os.getpid(), "ppid": os.getppid()}


def test_run_ranks_by_host_in_rank_order_joined_by_the_tcp_runtime(spark, monkeypatch):
    import gcurun.spark

    monkeypatch.setenv("DRIVER_ONLY", "yes")
    found = gcurun.spark.run(_identity_and_sum, env={"FROM_ENV": "1"}, start_timeout=120,
                             verbose=0)
    # num_proc: the session's default parallelism, one rank per executor core.
    assert [f["GCURUN_RANK"] for f in found] == ["0", "1"]
    assert all(f["GCURUN_SIZE"] == "2" and f["sum"] == 3.0 for f in found)
    # Both executors run on this host: one host's ranks, local ranks 0 and 1.
    assert [(f["GCURUN_LOCAL_RANK"], f["GCURUN_LOCAL_SIZE"]) for f in found] == \
        [("0", "2"), ("1", "2")]
    assert [f["TOPS_VISIBLE_DEVICES"] for f in found] == ["0,1", "0,1"]
    assert [f["GCURUN_DEVICE"] for f in found] == ["0", "1"]
    # env reaches every rank; the driver's own environment does not.
    assert all(f["FROM_ENV"] == "1" and f["DRIVER_ONLY"] is None for f in found)
    assert len({f["ppid"] for f in found}) == 2      # one task's worker each
    assert survivors([f["pid"] for f in found]) == []


def _talk(count):
    import sys

    rank = os.environ["GCURUN_RANK"]
    for i in range(count):
        print(f"rank {rank} line {i} " + "x" * 100)
    print(f"rank {rank} warns", file=sys.stderr)
    os.write(1, f"rank {rank} ends without a newline".encode())
    return int(rank)


STAMPED = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \[(\d)\] (.*)")


def test_every_line_of_every_rank_reaches_the_drivers_files_whole_and_stamped(spark):
    import gcurun.spark

    out, err = io.StringIO(), io.StringIO()
    count = 2000    # several chunks of each rank's pipe, arriving interleaved
    assert gcurun.spark.run(_talk, args=(count,), num_proc=2, stdout=out, stderr=err,
                            prefix_output_with_timestamp=True, verbose=0) == [0, 1]
    seen: dict[str, list[str]] = {"0": [], "1": []}
    for line in out.getvalue().splitlines():
        rank, text = STAMPED.fullmatch(line).groups()
        seen[rank].append(text)
    for rank in "01":
        assert seen[rank] == [f"rank {rank} line {i} " + "x" * 100 for i in range(count)] \
            + [f"rank {rank} ends without a newline"]
    assert sorted(STAMPED.fullmatch(line).groups() for line in err.getvalue().splitlines()) \
        == [("0", "rank 0 warns"), ("1", "rank 1 warns")]


def test_use_mpi_and_use_gloo_together_are_refused():
    pytest.importorskip("pyspark")
    import gcurun.spark
    from gcurun.spark import SparkUsageError

    with pytest.raises(SparkUsageError) as caught:
        gcurun.spark.run(print, use_mpi=True, use_gloo=True)
    assert str(caught.value) == (
        "gcurun.spark.run(use_mpi=True, use_gloo=True): the two exclude each other; give "
        "one (use_gloo: gcurun's tcp runtime, use_mpi: mpirun)")


def _fail_on_rank_one(value):
    if os.environ["GCURUN_RANK"] == "1":
        print("rank 1 gives up", flush=True)
        raise ValueError(f"bad value {value}")
    return value


def test_a_ranks_exception_is_raised_with_its_rank_and_traceback(spark):
    import gcurun.spark
    from gcurun.errors import RankFunctionError

    out = io.StringIO()
    with pytest.raises(RankFunctionError) as caught:
        gcurun.spark.run(_fail_on_rank_one, args=(7,), num_proc=2, start_timeout=120,
                         verbose=0, stdout=out)
    # What the failing rank wrote is there before the error leaves run.
    assert out.getvalue() == "[1] rank 1 gives up\n"
    error = caught.value
    assert (error.rank, error.error_type, error.message) == (1, "ValueError", "bad value 7")
    assert "in _fail_on_rank_one" in error.remote_traceback
    assert str(error).startswith("rank 1 on 127.0.0.1 raised ValueError: bad value 7")
    assert isinstance(error.__cause__, ValueError)


def _sleep_after_pid(directory, crash_rank=None):
    rank = os.environ["GCURUN_RANK"]
    with open(os.path.join(directory, "starts"), "a") as log:
        log.write(f"{rank} {os.getpid()} {os.getppid()}\n")
    if rank == crash_rank:
        os.kill(os.getppid(), 9)     # this rank's task dies: Spark retries the stage
    time.sleep(120)
    return rank


def _starts(directory: Path) -> list[list[int]]:
    path = directory / "starts"
    return [list(map(int, line.split())) for line in
            (path.read_text().splitlines() if path.exists() else [])]


def _run_in_thread(**kwargs) -> tuple[threading.Thread, dict]:
    import gcurun.spark

    outcome: dict = {}

    def body():
        try:
            outcome["result"] = gcurun.spark.run(_sleep_after_pid, verbose=0,
                                                 start_timeout=120, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            outcome["error"] = exc

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, outcome


def test_a_job_cancelled_from_spark_leaves_no_rank_or_worker(spark, tmp_path):
    from gcurun.spark import SparkJobFailed

    thread, outcome = _run_in_thread(args=(str(tmp_path),))
    wait_for("both ranks to start", lambda: len(_starts(tmp_path)) == 2, timeout=120)
    spark.sparkContext.cancelAllJobs()
    thread.join(120)
    assert isinstance(outcome.get("error"), SparkJobFailed), outcome
    pids = [pid for _, pid, ppid in _starts(tmp_path)] + \
        [ppid for _, pid, ppid in _starts(tmp_path)]
    assert survivors(pids, timeout=60) == []


@pytest.mark.long
def test_an_interrupted_driver_leaves_no_rank(spark, tmp_path):
    import _thread

    import gcurun.spark

    def interrupt_when_started():
        wait_for("both ranks to start", lambda: len(_starts(tmp_path)) == 2, timeout=120)
        _thread.interrupt_main()

    threading.Thread(target=interrupt_when_started, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        gcurun.spark.run(_sleep_after_pid, args=(str(tmp_path),), start_timeout=120,
                         verbose=0)
    pids = [pid for _, pid, _ in _starts(tmp_path)]
    assert len(pids) == 2 and survivors(pids, timeout=60) == []


@pytest.mark.long
def test_a_retried_task_never_starts_a_second_copy_of_a_rank(spark, tmp_path):
    from gcurun.spark import SparkJobFailed

    thread, outcome = _run_in_thread(args=(str(tmp_path), "1"))
    thread.join(180)
    error = outcome.get("error")
    assert isinstance(error, SparkJobFailed), outcome
    assert "rank 1 on 127.0.0.1 ended without returning a result" in str(error)
    starts = _starts(tmp_path)
    # Each rank ran at most once (rank 0 may not have begun when the job was cancelled).
    ranks = sorted(rank for rank, _, _ in starts)
    assert ranks in ([1], [0, 1]), starts
    assert survivors([pid for _, pid, _ in starts], timeout=60) == []


def test_ranks_that_cannot_all_start_time_out_and_leave_nothing(spark, tmp_path):
    import gcurun.spark
    from gcurun.spark import SparkStartTimeout

    with pytest.raises(SparkStartTimeout) as caught:
        gcurun.spark.run(_sleep_after_pid, args=(str(tmp_path),), num_proc=3,
                         start_timeout=3, verbose=0)
    assert str(caught.value).startswith(
        "gcurun.spark.run: 0 of 3 ranks started within start_timeout=3 s; a barrier "
        "stage needs 3 free task slots at once (the session's default parallelism is 2)")
    assert spark.sparkContext.statusTracker().getActiveJobsIds() == []


@pytest.mark.long
def test_speculation_never_starts_a_second_copy_of_a_rank(tmp_path):
    import json
    import subprocess
    import sys

    pytest.importorskip("pyspark")
    done = subprocess.run([sys.executable, "-m", "tests.spark.speculation_driver",
                           str(tmp_path)], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[2],
                          env={**os.environ, "SPARK_WORKER_DIR": str(tmp_path / "work")})
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stderr[-3000:]
    assert json.loads(lines[-1][len("RESULT "):]) == [0, 1]
    assert sorted(rank for rank, _, _ in _starts(tmp_path)) == [0, 1]
