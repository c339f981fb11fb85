"""Small helpers under Horovod's names (``horovod.tensorflow.util``): scripts and
Horovod's own tests import ``_executing_eagerly`` from here."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import tensorflow as tf


def _executing_eagerly() -> bool:
    """Whether TensorFlow runs eagerly here (TF2 outside ``tf.function``)."""
    return tf.executing_eagerly()


def _make_subgraph(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a ``tf.function`` (how Horovod groups eager ops into one graph)."""
    return tf.function(fn)


def vars_to_refs(variables: Iterable[Any]) -> list[Any]:
    """Hashable references of variables (``var.ref()``), for sets and dict keys."""
    return [v.ref() if hasattr(v, "ref") else v for v in variables]


def refs_to_vars(refs: Iterable[Any]) -> list[Any]:
    return [r.deref() if hasattr(r, "deref") else r for r in refs]


def var_key(variable: Any) -> Any:
    """A hashable key naming ``variable``: its ``ref()`` (tf.Variable, tensors), else its
    identity (Keras 3 variables have no ``ref``)."""
    ref = getattr(variable, "ref", None)
    return ref() if callable(ref) else id(variable)
