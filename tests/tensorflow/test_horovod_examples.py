"""Horovod 0.28.1's TF2 examples, unedited (``horovod_examples/``), under
``gcurun --horovod-alias on``: the custom training loop and the Keras one. They are Keras 2
scripts, run as their users run them on TensorFlow 2.16+: with tf-keras installed and
``TF_USE_LEGACY_KERAS=1`` so that ``tf.keras`` is Keras 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow", reason="TensorFlow is not installed "
                    "(pip install tensorflow-cpu==2.21.0)")
pytest.importorskip("tf_keras", reason="tf-keras (Keras 2) is not installed, which Horovod's "
                    "TF2 examples need on TensorFlow 2.16+ (pip install tf-keras==2.21.0)")

from tests.helpers import ROOT, run_gcurun  # noqa: E402
from tests.runtime.jobs import MPIRUN  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.tensorflow]
EXAMPLES = Path(__file__).resolve().parent / "horovod_examples"
# The smallest model of keras.applications; weights=None in the scripts, so nothing is
# downloaded.
SMALL = ("--model", "MobileNetV3Small", "--batch-size", "2", "--num-batches-per-iter", "1",
         "--num-iters", "2", "--no-cuda")
BACKENDS = [pytest.param((), id="tcp"),
            pytest.param(("--mpi",), id="mpi", marks=[
                pytest.mark.mpi, pytest.mark.long,
                pytest.mark.skipif(MPIRUN is None, reason="mpirun is not on PATH")])]


def run_example(name: str, flags: tuple[str, ...], *args: str):
    env = {"PYTHONPATH": str(ROOT), "TF_USE_LEGACY_KERAS": "1",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    return run_gcurun("-np", "2", *flags, "--horovod-alias", "on", sys.executable,
                      str(EXAMPLES / name), *SMALL, *args, env=env, timeout=280)


# The custom loop's unedited run is left to -m long: Horovod's TF2 loop runs by default in
# tests/tensorflow/test_horovod_scripts.py, the Keras example below.
@pytest.mark.long
@pytest.mark.parametrize("flags", BACKENDS)
def test_horovods_tf2_custom_loop_benchmark_runs_unedited(flags: tuple[str, ...]) -> None:
    done = run_example("tensorflow2_synthetic_benchmark.py", flags,
                       "--num-warmup-batches", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "[0] Number of CPUs: 2" in lines, lines
    assert "[0] Running benchmark..." in lines, lines
    assert any(line.startswith("[0] Total img/sec on 2 CPU(s): ") for line in lines), lines


@pytest.mark.parametrize("flags", BACKENDS)
def test_horovods_tf2_keras_benchmark_runs_unedited(flags: tuple[str, ...]) -> None:
    done = run_example("tensorflow2_keras_synthetic_benchmark.py", flags)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "[0] Number of CPUs: 2" in lines, lines
    assert any(line.startswith("[0] Iter #1: ") for line in lines), lines
    assert any(line.startswith("[0] Total img/sec on 2 CPU(s): ") for line in lines), lines
