"""A driver with Spark's speculation switched on as eagerly as it goes:
``python speculation_driver.py DIRECTORY`` runs a 2-rank job whose rank 1 is slow (the
task Spark would speculate) and prints ``RESULT [...]``. Its own process: speculation is
a setting of the session, which the shared test session does not have."""

from __future__ import annotations

import json
import os
import sys
import time

from pyspark.sql import SparkSession

import gcurun.spark
from tests.spark.conftest import spark_conf


def slow_rank_one(directory):
    rank = os.environ["GCURUN_RANK"]
    with open(os.path.join(directory, "starts"), "a") as log:
        log.write(f"{rank} {os.getpid()} {os.getppid()}\n")
    if rank == "1":
        time.sleep(8)
    return int(rank)


def main() -> None:
    session = (spark_conf(SparkSession.builder)
               .config("spark.speculation", "true")
               .config("spark.speculation.interval", "100ms")
               .config("spark.speculation.multiplier", "1")
               .config("spark.speculation.quantile", "0.1")
               .config("spark.speculation.minTaskRuntime", "100ms")
               .getOrCreate())
    try:
        results = gcurun.spark.run(slow_rank_one, args=(sys.argv[1],), start_timeout=300,
                                   verbose=0)
    finally:
        session.stop()
    print("RESULT " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
