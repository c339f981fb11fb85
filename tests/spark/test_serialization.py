"""Spark ML persistence of the trained Models (gcurun/spark/common/serialization.py) on
the run's local-cluster session: a Model saved with ``write().overwrite().save(path)``
and loaded with ``<Class>.load(path)`` predicts what the saved network does and keeps its
params. Models are built directly around tiny networks (no fit). The default run saves
and loads a TorchModel; the transforms (torch, then TensorFlow, imported in every
executor) are ``long``."""

from __future__ import annotations

import numpy as np
import pytest


def _frame(spark):
    rows = [([float(i), float(-i), 0.5 * i, 1.0], i % 2) for i in range(8)]
    return spark.createDataFrame(rows, ["features", "label"])


def _predictions(model, df, column):
    return [row[column] for row in model.transform(df).orderBy("features").collect()]


def _round_trip(model, cls, path):
    path.mkdir()
    (path / "stale").write_text("")
    model.write().overwrite().save(str(path))     # replaces what is there
    assert not (path / "stale").exists()
    return cls.load(str(path))


def _torch_model(df):
    import torch

    from gcurun.spark.common.util import column_metadata
    from gcurun.spark.torch import TorchModel

    torch.manual_seed(0)
    network = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(),
                                  torch.nn.Linear(3, 2))
    model = TorchModel(history={"loss": [0.7, 0.5]}, model=network,
                       feature_columns=["features"], label_columns=["label"],
                       optimizer=torch.optim.SGD(network.parameters(), lr=0.1),
                       run_id="saved", loss=torch.nn.functional.cross_entropy,
                       _metadata=column_metadata(df, ["features", "label"]),
                       rank_digests=["d0", "d0"]).setOutputCols(["scores"])
    return network, model


def _network_outputs(network, df):
    import torch

    rows = sorted(row["features"] for row in df.collect())
    with torch.no_grad():
        return np.asarray(network(torch.tensor(rows)).tolist())


def test_a_saved_torch_model_loads_with_its_params_and_network(spark, tmp_path):
    torch = pytest.importorskip("torch")
    from gcurun.spark.torch import TorchModel

    df = _frame(spark)
    network, model = _torch_model(df)
    loaded = _round_trip(model, TorchModel, tmp_path / "torch-model")

    assert isinstance(loaded, TorchModel) and loaded.uid == model.uid
    assert (loaded.getHistory(), loaded.getRunId(), loaded.getRankDigests(),
            loaded.getOutputCols(), loaded.getFeatureColumns()) == \
        ({"loss": [0.7, 0.5]}, "saved", ["d0", "d0"], ["scores"], ["features"])
    assert loaded.getLoss() is torch.nn.functional.cross_entropy
    assert (_network_outputs(loaded.getModel(), df) == _network_outputs(network, df)).all()


@pytest.mark.long
def test_a_loaded_torch_models_transform_predicts_what_the_saved_network_does(spark,
                                                                            tmp_path):
    pytest.importorskip("torch")
    from gcurun.spark.torch import TorchModel

    df = _frame(spark)
    network, model = _torch_model(df)
    loaded = _round_trip(model, TorchModel, tmp_path / "torch-model")
    assert np.asarray(_predictions(loaded, df, "scores")) == \
        pytest.approx(_network_outputs(network, df), rel=1e-6)


@pytest.mark.long
@pytest.mark.timeout(900)
def test_a_saved_keras_model_loads_and_predicts_the_same(spark, tmp_path):
    pytest.importorskip("tensorflow")
    from gcurun.runtime.tensorflow.keras._which import keras
    from gcurun.spark.common.util import column_metadata
    from gcurun.spark.keras import KerasModel

    df = _frame(spark)
    keras.utils.set_random_seed(0)
    network = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(3, "tanh"),
                                keras.layers.Dense(1, "sigmoid")])
    model = KerasModel(history={"loss": [0.6]}, model=network, feature_columns=["features"],
                       label_columns=["label"], run_id="keras-saved",
                       _metadata=column_metadata(df, ["features", "label"]),
                       rank_digests=["k", "k"])
    loaded = _round_trip(model, KerasModel, tmp_path / "keras-model")

    assert isinstance(loaded, KerasModel) and loaded.getRunId() == "keras-saved"
    assert all((a == b).all() for a, b in zip(loaded.getModel().get_weights(),
                                              network.get_weights(), strict=True))
    rows = sorted(row["features"] for row in df.collect())
    expected = network.predict_on_batch(np.array(rows, dtype=np.float32))[:, 0]
    # A one-value output of an integral label is rounded to its class.
    assert _predictions(loaded, df, "label__output") == [int(round(float(v)))
                                                         for v in expected]
