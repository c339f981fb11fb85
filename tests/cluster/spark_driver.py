"""The driver of a Spark job on the namespace hosts' standalone cluster:
``python spark_driver.py SPEC_FILE`` runs ``gcurun.spark.run`` or ``run_elastic`` of a
function of tests/cluster/spark_ranks.py and prints ``RESULT {...}``, then stops its
session (and so its executors)."""

from __future__ import annotations

import json
import sys
import threading

from pyspark.sql import SparkSession

import gcurun.spark
from tests.cluster import spark_ranks


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    session = (SparkSession.builder.master(spec["master"]).appName("gcurun-cluster")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.host", spec["driver_host"])
               .config("spark.driver.bindAddress", spec["driver_host"])
               .config("spark.executor.memory", "512m")
               .config("spark.executor.cores", "1")
               .config("spark.cores.max", str(spec.get("cores", 3)))
               .config("spark.python.task.killTimeout", "1s")
               .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
               .config("spark.executor.extraJavaOptions", "-XX:TieredStopAtLevel=1")
               .getOrCreate())
    try:
        fn = getattr(spark_ranks, spec["function"])
        if spec.get("kill_executor_of"):
            threading.Thread(target=spark_ranks.kill_when_asked,
                             args=(spec["kill_executor_of"],), daemon=True).start()
        try:
            if spec.get("elastic"):
                results = gcurun.spark.run_elastic(fn, args=tuple(spec.get("args", ())),
                                                   verbose=0, **spec["elastic"])
            else:
                results = gcurun.spark.run(fn, args=tuple(spec.get("args", ())),
                                           num_proc=spec["num_proc"], start_timeout=300,
                                           verbose=0)
            outcome = {"results": results}
        except Exception as exc:  # noqa: BLE001 - reported to the test
            outcome = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        session.stop()
    print("RESULT " + json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
