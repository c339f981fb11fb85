"""The driver of an Estimator fit on the namespace hosts' standalone cluster:
``python spark_estimator_driver.py SPEC_FILE`` fits and transforms with
examples/spark_estimator.py on ``num_proc`` executors (one per host) and prints
``RESULT {...}`` (the example's figures), then stops its session; see
:func:`spark_standalone.run_driver`."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from tests.cluster.spark_standalone import run_driver

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_estimator.py"


def job(session: Any, spec: dict) -> dict:
    loader = importlib.util.spec_from_file_location("spark_estimator_example", EXAMPLE)
    example = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(example)
    return example.main(session, spec["store"], num_proc=spec["num_proc"],
                        epochs=spec["epochs"], run_id="cluster", verbose=0)


if __name__ == "__main__":
    run_driver("gcurun-estimator", job)
