"""Fit a torch model to a Spark DataFrame with gcurun's TorchEstimator, then predict.

    python examples/spark_estimator.py                       # local[2]: 2 ranks
    python examples/spark_estimator.py --master spark://h1:7077 --num-proc 4 \
        --store /shared/estimator-store

The data are synthetic and learnable: 4 features drawn from a normal distribution and a
label that is 1 where a fixed linear function of them is positive (about half the rows).
The Estimator materialises the training DataFrame into the store as Parquet, trains a
small network on ``--num-proc`` ranks (one Spark task each) with gcurun's
DistributedOptimizer, and returns a ``TorchModel``; its ``transform`` adds the column
``label__output`` (the two logits) to a held-out DataFrame, whose accuracy is printed
beside the chance level. Each rank reports a SHA-256 of its final weights: one value
means every rank ended with the same model. The imports are Horovod's with ``horovod``
changed to ``gcurun``.
"""

from __future__ import annotations

import argparse
import tempfile
from typing import Any

import numpy as np
import torch

from gcurun.spark.common.store import Store
from gcurun.spark.torch import TorchEstimator

WEIGHTS = np.array([1.5, -2.0, 0.5, 1.0])


def make_rows(count: int, seed: int) -> list[tuple[list[float], int]]:
    """``count`` (features, label) rows; the same seed gives the same rows."""
    features = np.random.default_rng(seed).normal(size=(count, len(WEIGHTS)))
    labels = (features @ WEIGHTS > 0).astype(int)
    return [(row.tolist(), int(label)) for row, label in zip(features, labels, strict=False)]


def main(spark: Any, store_path: str, num_proc: int = 2, epochs: int = 4,
         run_id: str | None = None, verbose: int = 1) -> dict[str, Any]:
    """Fit on 512 rows, predict 256 held-out rows; the figures of the run."""
    train_df = spark.createDataFrame(make_rows(512, seed=1), ["features", "label"])
    test_df = spark.createDataFrame(make_rows(256, seed=2), ["features", "label"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 2))
    estimator = TorchEstimator(
        num_proc=num_proc, store=Store.create(store_path), model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9),
        loss=torch.nn.functional.cross_entropy, feature_cols=["features"],
        label_cols=["label"], batch_size=32, epochs=epochs, validation=0.125,
        partitions_per_process=2, random_seed=0, run_id=run_id, verbose=verbose)
    fitted = estimator.fit(train_df)
    predictions = fitted.transform(test_df).select("label", "label__output").toPandas()
    predicted = np.array([int(np.argmax(v)) for v in predictions["label__output"]])
    labels = predictions["label"].to_numpy()
    chance = max(labels.mean(), 1 - labels.mean())
    return {"accuracy": float((predicted == labels).mean()), "chance": float(chance),
            "rows": len(labels), "history": fitted.getHistory(),
            "digests": fitted.getRankDigests(), "run_id": fitted.getRunId()}


if __name__ == "__main__":
    from pyspark.sql import SparkSession

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--store", default=None,
                        help="a directory every executor reaches (default: a new temporary one)")
    options = parser.parse_args()
    session = SparkSession.builder.master(options.master).getOrCreate()
    with tempfile.TemporaryDirectory() as scratch:
        figures = main(session, options.store or scratch, options.num_proc, options.epochs)
    session.stop()
    print(f"held-out accuracy {figures['accuracy']:.3f} on {figures['rows']} rows "
          f"(chance {figures['chance']:.3f}); loss by epoch "
          f"{[round(v, 4) for v in figures['history']['loss']]}")
    print(f"weights digest by rank: {figures['digests']}")
