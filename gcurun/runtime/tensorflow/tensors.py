"""TensorFlow tensors as the numpy arrays the runtime moves, and back.

An eager tensor in host memory is handed over as a numpy view of its own buffer (the
``_numpy()`` of TensorFlow's eager tensors; the public ``.numpy()`` returns a copy): no
copy. Tensors on a device come back to the host that way (TF copies them there), and
results go back to the input's device when first used.
bfloat16, which numpy has only through ml_dtypes and the runtime does not reduce, is
moved as float32 (exact: every bfloat16 value is a float32) and narrowed afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

# Dtypes the runtime moves as they are (numpy has them natively).
NATIVE = frozenset({
    tf.bool, tf.int8, tf.uint8, tf.int16, tf.uint16, tf.int32, tf.uint32, tf.int64,
    tf.uint64, tf.float16, tf.float32, tf.float64, tf.complex64, tf.complex128,
})
# Dtypes numpy lacks, moved as a wider one it has.
WIDENED = {tf.bfloat16: tf.float32}


def check_dtype(dtype: tf.DType, what: str) -> None:
    """Raise TypeError naming the supported dtypes when ``dtype`` cannot be moved."""
    if dtype.base_dtype in NATIVE or dtype.base_dtype in WIDENED:
        return
    names = ", ".join(sorted(d.name for d in NATIVE | set(WIDENED)))
    raise TypeError(f"{what}: dtype {dtype.name} is not supported; use one of {names}")


def host_array(value: Any) -> np.ndarray:
    """The numpy array of an eager tensor (sharing its memory when it is in host memory),
    variable or host value, in its wire dtype. The caller keeps ``value`` alive while
    the array is in use."""
    view = getattr(value, "_numpy", None)
    if callable(view):
        array = view()
    else:
        array = value.numpy() if hasattr(value, "numpy") else value
    return widen(np.asarray(array))


def widen(array: np.ndarray) -> np.ndarray:
    """``array`` in a dtype the runtime moves: bfloat16 (ml_dtypes) becomes float32."""
    if array.dtype.kind == "V" or array.dtype.name == "bfloat16":
        return array.astype(np.float32)
    return array


def narrow(array: Any, dtype: tf.DType) -> np.ndarray:
    """A runtime result as a numpy array of ``dtype`` (the tensor's own dtype)."""
    array = np.asarray(array)
    want = dtype.base_dtype.as_numpy_dtype
    return array if array.dtype == want else array.astype(want)


def to_tensor(array: Any, dtype: tf.DType) -> tf.Tensor:
    """An eager tensor of ``dtype`` holding a runtime result."""
    return tf.convert_to_tensor(narrow(array, dtype))


def as_tensor(value: Any, what: str) -> tf.Tensor:
    """``value`` (a tensor, variable or array) as a dense tensor of a supported dtype.

    Raises TypeError for IndexedSlices (which the callers handle themselves) and
    unsupported dtypes."""
    if isinstance(value, tf.IndexedSlices):
        raise TypeError(f"{what}: tf.IndexedSlices cannot be handled densely here; call "
                        "allreduce (which gathers them) or convert with tf.convert_to_tensor")
    tensor = tf.convert_to_tensor(value)
    check_dtype(tensor.dtype, what)
    return tensor


def as_tensors(values: Sequence[Any], what: str) -> list[tf.Tensor]:
    return [as_tensor(v, what) for v in values]
