"""The driver of an Estimator fit on the namespace hosts' standalone cluster:
``python spark_estimator_driver.py SPEC_FILE`` fits and transforms with
examples/spark_estimator.py on ``num_proc`` executors (one per host) and prints
``RESULT {...}`` (the example's figures), then stops its session."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_estimator.py"


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    loader = importlib.util.spec_from_file_location("spark_estimator_example", EXAMPLE)
    example = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(example)
    session = (SparkSession.builder.master(spec["master"]).appName("gcurun-estimator")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.host", spec["driver_host"])
               .config("spark.driver.bindAddress", spec["driver_host"])
               .config("spark.executor.memory", "512m")
               .config("spark.executor.cores", "1")
               .config("spark.cores.max", str(spec["num_proc"]))
               .config("spark.python.task.killTimeout", "1s")
               .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
               .config("spark.executor.extraJavaOptions", "-XX:TieredStopAtLevel=1")
               .getOrCreate())
    try:
        try:
            outcome = example.main(session, spec["store"], num_proc=spec["num_proc"],
                                   epochs=spec["epochs"], run_id="cluster", verbose=0)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            outcome = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        session.stop()
    print("RESULT " + json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
