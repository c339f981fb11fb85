"""The driver of a Spark job on the namespace hosts' standalone cluster:
``python spark_driver.py SPEC_FILE`` runs ``gcurun.spark.run`` or ``run_elastic`` of a
function of tests/cluster/spark_ranks.py and prints ``RESULT {...}``, then stops its
session (and so its executors); see :func:`spark_standalone.run_driver`."""

from __future__ import annotations

import io
import threading
from typing import Any

import gcurun.spark
from tests.cluster import spark_ranks
from tests.cluster.spark_standalone import run_driver


def job(session: Any, spec: dict) -> dict:
    fn = getattr(spark_ranks, spec["function"])
    if spec.get("kill_executor_of"):
        threading.Thread(target=spark_ranks.kill_when_asked,
                         args=(spec["kill_executor_of"],), daemon=True).start()
    out = io.StringIO()
    if spec.get("elastic"):
        results = gcurun.spark.run_elastic(fn, args=tuple(spec.get("args", ())), verbose=0,
                                           stdout=out, **spec["elastic"])
    else:
        results = gcurun.spark.run(fn, args=tuple(spec.get("args", ())),
                                   num_proc=spec["num_proc"], start_timeout=300, verbose=0,
                                   stdout=out, use_mpi=spec.get("use_mpi"))
    return {"results": results, "stdout": out.getvalue()}


if __name__ == "__main__":
    run_driver("gcurun-cluster", job)
