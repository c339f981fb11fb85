"""gcurun.runtime.tensorflow in this process, alone (the runtime's one-rank backend): the
tensors handed to the runtime, the TensorFlow classes of the runtime's errors (eagerly
and from graphs), compression, and the wrappers' arguments."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed "
                                              "(pip install tensorflow-cpu)")
keras = pytest.importorskip("keras")

import gcurun.runtime.tensorflow as hvd  # noqa: E402
import gcurun.runtime.tensorflow.keras as hvd_keras  # noqa: E402
from gcurun.errors import PeerFailureError  # noqa: E402
from gcurun.runtime import ArgumentError, MismatchError  # noqa: E402
from gcurun.runtime.tensorflow.errors import (  # noqa: E402
    OK_STATUS,
    mismatch_status,
    status_check,
    tf_error,
)
from gcurun.runtime.tensorflow.tensors import host_array, narrow  # noqa: E402

pytestmark = pytest.mark.tensorflow


@pytest.fixture
def alone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("GCURUN_RANK", "GCURUN_SIZE", "GCURUN_RENDEZVOUS", "GCURUN_BACKEND",
                 "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    hvd.init()
    yield
    hvd.shutdown()


# -- tensors -------------------------------------------------------------------------------


def test_an_eager_host_tensor_is_handed_over_without_a_copy() -> None:
    t = tf.constant(np.arange(1024, dtype=np.float32))
    assert np.shares_memory(host_array(t), host_array(t))


def test_bfloat16_travels_as_float32_and_comes_back() -> None:
    t = tf.constant([1.5, -2.25, 3.0], tf.bfloat16)
    wide = host_array(t)
    assert wide.dtype == np.float32 and wide.tolist() == [1.5, -2.25, 3.0]
    back = narrow(wide, tf.bfloat16)
    assert tf.as_dtype(back.dtype) == tf.bfloat16


def test_every_collective_keeps_dtype_and_shape_on_one_rank(alone: None) -> None:
    x = tf.constant([[1, 2], [3, 4]], tf.int32)
    assert hvd.allreduce(x, op=hvd.Sum).numpy().tolist() == [[1, 2], [3, 4]]
    assert hvd.allgather(x).shape == (2, 2)
    assert hvd.broadcast(x, 0).dtype == tf.int32
    assert hvd.reducescatter(x, op=hvd.Sum).numpy().tolist() == [[1, 2], [3, 4]]
    assert hvd.alltoall(x).numpy().tolist() == [[1, 2], [3, 4]]
    assert int(hvd.join()) == 0


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(("error", "tf_class"), [
    (MismatchError("allreduce 'x': rank 0 has shape [2], rank 1 [3]"),
     tf.errors.FailedPreconditionError),
    (ArgumentError("root_rank=7 is not a rank of this job; use 0..1"),
     tf.errors.InvalidArgumentError),
    (PeerFailureError("rank 1 died"), tf.errors.UnavailableError),
])
def test_runtime_errors_are_also_tensorflows(error: Exception, tf_class: type) -> None:
    converted = tf_error(error)
    assert isinstance(converted, type(error)) and isinstance(converted, tf_class)
    assert converted.message == str(error)


def test_a_mismatch_status_fails_a_graph_with_failed_precondition_and_the_message() -> None:
    status = mismatch_status(MismatchError("allgather 'a/b': rank 0 has [2, 3]\nrank 1 [2, 4]"))
    assert status.startswith(OK_STATUS + b"/") and b"/" not in status[len(OK_STATUS) + 1:]

    @tf.function
    def check(path: tf.Tensor) -> tf.Tensor:
        with tf.control_dependencies([status_check(path)]):
            return tf.constant(1)

    assert int(check(tf.constant(OK_STATUS))) == 1
    with pytest.raises(tf.errors.FailedPreconditionError, match="rank 0 has"):
        check(tf.constant(status))


def test_xla_is_refused_with_a_message_that_says_how(alone: None) -> None:
    @tf.function(jit_compile=True)
    def reduce(x: tf.Tensor) -> tf.Tensor:
        return hvd.allreduce(x)

    with pytest.raises(ValueError, match="jit_compile=False"):
        reduce(tf.ones([2]))


def test_indexed_slices_refuse_ops_a_gather_cannot_do(alone: None) -> None:
    slices = tf.IndexedSlices(tf.ones([1, 3]), tf.constant([0]))
    for op in (hvd.Min, hvd.Max, hvd.Product, hvd.Adasum):
        with pytest.raises(NotImplementedError):
            hvd.allreduce(slices, op=op)
    with pytest.raises(NotImplementedError, match="prescale_factor"):
        hvd.allreduce(slices, op=hvd.Sum, prescale_factor=2.0)


# -- compression ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [tf.float16, tf.float32, tf.float64, tf.int32, tf.bool])
def test_fp16_compression_sends_floats_as_half_and_restores_the_dtype(dtype: tf.DType) -> None:
    tensor = tf.ones([3], dtype)
    compressed, ctx = hvd.Compression.fp16.compress(tensor)
    assert compressed.dtype == (tf.float16 if dtype.is_floating else dtype)
    assert hvd.Compression.fp16.decompress(compressed, ctx).dtype == dtype


# -- wrappers ------------------------------------------------------------------------------


def test_distributed_optimizer_says_what_it_cannot_wrap() -> None:
    with pytest.raises(ValueError, match="neither a tf.compat.v1.train.Optimizer"):
        hvd.DistributedOptimizer(object())
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                 op=hvd.Adasum)


def test_a_keras_optimizer_keeps_its_class_configuration_and_state(alone: None) -> None:
    plain = keras.optimizers.Adam(learning_rate=0.01)
    weights = [keras.Variable(np.ones(3, np.float32))]
    plain.apply([tf.ones([3])], weights)
    wrapped = hvd.DistributedOptimizer(plain)          # through the TF1 entry point
    assert type(wrapped).__name__ == "Adam" and isinstance(wrapped, keras.optimizers.Adam)
    assert wrapped.get_config() == plain.get_config()
    assert int(wrapped.iterations.numpy()) == 1
    assert [v.numpy().tolist() for v in wrapped.variables] == \
        [v.numpy().tolist() for v in plain.variables]
    with pytest.raises(ValueError, match="wrapped already"):
        hvd_keras.DistributedOptimizer(wrapped)


def test_backward_passes_per_step_is_keras_gradient_accumulation() -> None:
    opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                         backward_passes_per_step=3)
    assert opt.gradient_accumulation_steps == 3
    with pytest.raises(ValueError, match="gradient_accumulation_steps=2"):
        hvd_keras.DistributedOptimizer(
            keras.optimizers.SGD(0.1, gradient_accumulation_steps=2),
            backward_passes_per_step=3)
    with pytest.raises(ValueError, match="LossScaleOptimizer"):
        hvd_keras.DistributedOptimizer(
            keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)),
            backward_passes_per_step=2)
