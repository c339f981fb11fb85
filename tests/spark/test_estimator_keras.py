"""The Keras Estimator on the shared local-cluster session (long: TensorFlow starts slowly
on every rank and executor): a sigmoid classifier fitted on 2 ranks predicts a held-out
DataFrame better than chance (its output rounded to the integral label's class), every
rank ends with the same weights, and a second fit with the same run_id resumes after the
last checkpoint."""

from __future__ import annotations

import numpy as np
import pytest

from tests.spark.test_estimator_torch import load_example

pytestmark = pytest.mark.long


@pytest.mark.timeout(1800)
def test_a_keras_model_fits_predicts_better_than_chance_and_resumes(spark, tmp_path):
    pytest.importorskip("tensorflow")
    from gcurun.runtime.tensorflow.keras._which import keras
    from gcurun.spark.common.store import Store
    from gcurun.spark.keras import KerasEstimator, KerasModel

    example = load_example()
    train_df = spark.createDataFrame(example.make_rows(512, seed=1), ["features", "label"])
    test_df = spark.createDataFrame(example.make_rows(256, seed=2), ["features", "label"])
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(16, "relu"),
                              keras.layers.Dense(1, "sigmoid")])
    store = Store.create(str(tmp_path / "store"))

    def fit(epochs):
        estimator = KerasEstimator(
            num_proc=2, store=store, model=model, optimizer=keras.optimizers.Adam(0.02),
            loss="binary_crossentropy", metrics=["accuracy"], feature_cols=["features"],
            label_cols=["label"], batch_size=32, epochs=epochs, validation=0.125,
            partitions_per_process=2, random_seed=0, run_id="keras", verbose=0)
        return estimator.fit(train_df)

    fitted = fit(3)
    assert isinstance(fitted, KerasModel)
    predictions = fitted.transform(test_df).select("label", "label__output").toPandas()
    labels = predictions["label"].to_numpy()
    accuracy = float((predictions["label__output"].to_numpy() == labels).mean())
    chance = max(labels.mean(), 1 - labels.mean())
    digests = fitted.getRankDigests()
    print(f"\nkeras held-out accuracy {accuracy:.3f} on {len(labels)} rows, chance "
          f"{chance:.3f}; history {fitted.getHistory()}; digests {digests}")
    assert accuracy > chance + 0.2
    assert len(digests) == 2 and len(set(digests)) == 1
    assert len(fitted.getHistory()["loss"]) == 3 and "val_loss" in fitted.getHistory()

    resumed = fit(4)
    assert np.allclose(resumed.getHistory()["loss"][:3], fitted.getHistory()["loss"])
    assert len(resumed.getHistory()["loss"]) == 4
    assert len(set(resumed.getRankDigests())) == 1
