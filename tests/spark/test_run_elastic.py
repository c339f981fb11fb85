"""gcurun.spark.run_elastic on the run's local-cluster session: workers in Spark agent
tasks, driven by gcurun's elastic runner."""

from __future__ import annotations

import os
import signal

import pytest

from tests.helpers import survivors, wait_for


def elastic_training(steps, directory=None):
    """Every worker joins, trains ``steps`` committed steps with an allreduce each (the
    first worker of a two-worker generation records its executor and waits at step 1
    while ``directory`` holds no ``go`` file), and returns rank, size and the sum."""
    import time

    import numpy as np

    import gcurun.runtime as hvd
    from gcurun.runtime import elastic
    from gcurun.spark.agent import executor_pid

    hvd.init()
    state = elastic.ObjectState(step=0, total=0.0)

    @elastic.run
    def train(state):
        while state.step < steps:
            if directory and state.step == 1 and hvd.size() == 2 and hvd.rank() == 1:
                with open(os.path.join(directory, "executor"), "w") as out:
                    out.write(f"{executor_pid()} {os.getpid()}")
                while not os.path.exists(os.path.join(directory, "go")):
                    time.sleep(0.1)
            state.total += float(hvd.allreduce(np.ones(1), op=hvd.Sum, name="one")[0])
            print(f"step {state.step} of {hvd.size()}")
            state.step += 1
            state.commit()
        return hvd.rank(), hvd.size(), state.total, os.getpid()

    return train(state)


def test_run_elastic_runs_every_worker_to_the_end(spark, capsys):
    import gcurun.spark

    results = gcurun.spark.run_elastic(elastic_training, args=(3,), num_proc=2,
                                       start_timeout=120, elastic_timeout=120, verbose=0)
    assert [r[:3] for r in results] == [(0, 2, 6.0), (1, 2, 6.0)]
    # Every worker's lines, prefixed with its worker id, on the driver's stdout.
    lines = capsys.readouterr().out.splitlines()
    for worker in (0, 1):
        assert [line for line in lines if line.startswith(f"[{worker}] ")] == \
            [f"[{worker}] step {step} of 2" for step in range(3)]
    assert survivors([r[3] for r in results]) == []


@pytest.mark.long
def test_an_executor_lost_under_run_elastic_reforms_the_job_from_the_last_commit(
        spark, tmp_path):
    import threading

    import gcurun.spark

    def kill_the_executor():
        wait_for("the executor to kill", lambda: (tmp_path / "executor").exists(), 180)
        executor, rank = map(int, (tmp_path / "executor").read_text().split())
        os.kill(executor, signal.SIGKILL)
        # The rank goes with its executor; "go" lets one that outlived it go on.
        survivors([rank], timeout=60)
        (tmp_path / "go").write_text("")

    threading.Thread(target=kill_the_executor, daemon=True).start()
    results = gcurun.spark.run_elastic(elastic_training, args=(4, str(tmp_path)),
                                       num_proc=2, min_num_proc=1, start_timeout=120,
                                       elastic_timeout=180, verbose=0)
    # The lost executor's worker never finished; the survivor went back to the last
    # commit (step 1) and finished, alone or with a worker on the executor Spark
    # started in place of the lost one: every step's sum counts the workers of its
    # generation, 2 before the loss.
    lost = int((tmp_path / "executor").read_text().split()[1])
    assert results and lost not in [r[3] for r in results]
    assert all(r[0] < r[1] and 4.0 + r[1] <= r[2] <= 8.0 for r in results)
    assert survivors([lost] + [r[3] for r in results]) == []
