"""The torch Estimator on the shared local-cluster session, through gcurun.spark.run:
examples/spark_estimator.py fits a learnable synthetic task on 2 ranks (2 executors) and
predicts a held-out DataFrame better than chance, every rank ends with the same weights,
the run's checkpoint and logs are in the store, and the materialised data are gone. In
the long run: a second fit with the same run_id resumes after the last checkpoint."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_example():
    spec = importlib.util.spec_from_file_location(
        "spark_estimator_example", ROOT / "examples" / "spark_estimator.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example():
    pytest.importorskip("torch")
    return load_example()


@pytest.mark.timeout(1200)     # the shared session starts first, slowly on a busy machine
def test_the_example_fits_and_predicts_better_than_chance(spark, tmp_path, example):
    store = tmp_path / "store"
    figures = example.main(spark, str(store), num_proc=2, epochs=3, run_id="example",
                           verbose=0)
    print(f"\nheld-out accuracy {figures['accuracy']:.3f} on {figures['rows']} rows, "
          f"chance {figures['chance']:.3f}; loss {figures['history']['loss']}; "
          f"digests {figures['digests']}")
    assert figures["rows"] == 256
    assert figures["accuracy"] > figures["chance"] + 0.2
    assert len(figures["digests"]) == 2 and len(set(figures["digests"])) == 1
    assert len(figures["history"]["loss"]) == 3 and len(figures["history"]["val_loss"]) == 3
    run = store / "runs" / "example"
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint.json", "checkpoint.pt",
                                                     "logs"]
    logged = [json.loads(line) for line in (run / "logs" / "metrics.jsonl").read_text()
              .splitlines()]
    assert [entry["epoch"] for entry in logged] == [1, 2, 3]
    assert not [p for p in store.iterdir() if p.name.startswith("intermediate_")]


@pytest.mark.long
@pytest.mark.timeout(1200)
def test_a_second_fit_of_a_run_resumes_after_its_last_checkpoint(spark, tmp_path, example):
    store = tmp_path / "store"
    figures = example.main(spark, str(store), num_proc=2, epochs=2, run_id="again",
                           verbose=0)
    resumed = example.main(spark, str(store), num_proc=2, epochs=3, run_id="again",
                           verbose=0)
    # Epochs 1-2 come from the checkpoint; only the 3rd is trained.
    assert resumed["history"]["loss"][:2] == figures["history"]["loss"]
    assert len(resumed["history"]["loss"]) == 3
    assert len(set(resumed["digests"])) == 1 and resumed["digests"] != figures["digests"]
    assert resumed["accuracy"] > resumed["chance"] + 0.2
