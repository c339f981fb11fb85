"""The Keras binding follows the Keras that ``tf.keras`` is: Keras 2 (tf-keras) when
``TF_USE_LEGACY_KERAS=1``, Keras 3 otherwise. Each case runs in a fresh interpreter, since
TensorFlow decides at import."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tensorflow", reason="TensorFlow is not installed "
                    "(pip install tensorflow-cpu==2.21.0)")
pytest.importorskip("tf_keras", reason="tf-keras (Keras 2) is not installed "
                    "(pip install tf-keras==2.21.0)")

from tests.helpers import ROOT  # noqa: E402

pytestmark = pytest.mark.tensorflow

CHECK = textwrap.dedent("""
    import tensorflow as tf
    import gcurun.runtime.tensorflow.keras as hvd
    from gcurun.runtime.tensorflow.keras._which import LEGACY
    keras = tf.keras
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01))
    print("legacy", LEGACY)
    print("optimizer", isinstance(opt, keras.optimizers.SGD), type(opt).__name__)
    print("callback", isinstance(hvd.callbacks.MetricAverageCallback(), keras.callbacks.Callback))
    try:
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.01), backward_passes_per_step=2)
        print("passes accepted")
    except ValueError as e:
        print("passes refused:", e)
""")


def run_check(legacy: bool) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_USE_LEGACY_KERAS", None)
    if legacy:
        env["TF_USE_LEGACY_KERAS"] = "1"
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_keras_2_optimizers_and_callbacks_when_tf_keras_is_keras_2() -> None:
    assert run_check(legacy=True) == [
        "legacy True",
        "optimizer True SGD",
        "callback True",
        "passes refused: backward_passes_per_step=2 with a Keras 2 (tf-keras) optimizer: "
        "gcurun accumulates gradients through Keras 3's gradient_accumulation_steps only; "
        "use Keras 3 (unset TF_USE_LEGACY_KERAS) or backward_passes_per_step=1",
    ]


@pytest.mark.long
def test_keras_3_as_before_otherwise() -> None:
    """In -m long. By default Keras 3 (the default Keras) is covered by
    test_jobs.py::test_keras_fit_matches_one_rank_on_the_full_batch (the binding's
    DistributedOptimizer and callbacks in model.fit, backward_passes_per_step=2 accepted
    and trained) and test_units.py::test_a_keras_optimizer_keeps_its_class_configuration_and_state
    (the wrapped optimizer is the Keras 3 optimizer's class)."""
    assert run_check(legacy=False) == [
        "legacy False", "optimizer True SGD", "callback True", "passes accepted"]
