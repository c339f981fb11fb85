"""Elastic training for TensorFlow (Horovod's ``horovod.tensorflow.elastic``): the state
objects and ``run``, on the framework-neutral elastic loop (:mod:`gcurun.runtime.elastic`).

``TensorFlowState`` commits, restores and synchronizes TensorFlow variables (eager, or
in a session) beside plain values; ``TensorFlowKerasState`` those of a Keras model and
its optimizer. ``run`` wraps a training function: on a lost peer the last commit is
restored, the job re-forms in this process (``shutdown(); init()``) and the function
runs again after the reset callbacks and ``state.sync()``; hosts added or removed
interrupt it at a ``commit()`` without restoring. Outside an elastic job the state is
synchronized once and the function runs once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from gcurun.errors import CollectiveError, CollectiveTimeout, PeerFailureError
from gcurun.runtime.elastic import (
    HostsUpdatedInterrupt,
    HostUpdateResult,
    ObjectState,
    RendezvousLost,
    State,
    WorkerRemoved,
    run_fn,
)
from gcurun.runtime.tensorflow import basics
from gcurun.runtime.tensorflow.functions import broadcast_variables

# What a graph's collective op says when the runtime's error crossed tf.numpy_function
# (which keeps only the class name and the message): these re-form the job.
RECOVERABLE_NAMES = (PeerFailureError.__name__, CollectiveTimeout.__name__,
                     "HorovodInternalError")


class TensorFlowState(ObjectState):
    """:class:`ObjectState` plus TensorFlow variables (eager, or run in ``session``)."""

    def __init__(self, variables: Sequence[Any] | None = None, session: Any = None,
                 **kwargs: Any):
        self.variables = list(variables if variables is not None
                              else tf.compat.v1.global_variables())
        self.session = session
        self._values = self._read()
        super().__init__(**kwargs)

    def _read(self) -> list[np.ndarray]:
        if tf.executing_eagerly():
            return [np.array(v.numpy()) for v in self.variables]
        session = self.session or tf.compat.v1.get_default_session()
        return list(session.run(self.variables)) if self.variables else []

    def _write(self, values: list[np.ndarray]) -> None:
        if tf.executing_eagerly():
            for var, value in zip(self.variables, values, strict=True):
                var.assign(value)
            return
        session = self.session or tf.compat.v1.get_default_session()
        for var, value in zip(self.variables, values, strict=True):
            var.load(value, session)

    def save(self) -> None:
        self._values = self._read()
        super().save()

    def restore(self) -> None:
        self._write(self._values)
        super().restore()

    def sync(self) -> None:
        if self.variables:
            op = broadcast_variables(self.variables, 0)
            if not tf.executing_eagerly():
                (self.session or tf.compat.v1.get_default_session()).run(op)
        super().sync()
        self.save()


class TensorFlowKerasState(TensorFlowState):
    """:class:`TensorFlowState` of a Keras model's and its optimizer's variables. On a
    reset the model's compiled functions are dropped: they were traced for the old
    size (an average divides by it), and ``fit`` traces them anew."""

    def __init__(self, model: Any, optimizer: Any = None, backend: Any = None,
                 **kwargs: Any):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else model.optimizer
        variables = list(model.variables)
        if self.optimizer is not None:
            found = self.optimizer.variables
            variables += list(found() if callable(found) else found)
        super().__init__(variables, **kwargs)

    def reset(self) -> None:
        for attr in ("train_function", "test_function", "predict_function"):
            if getattr(self.model, attr, None) is not None:
                setattr(self.model, attr, None)


def recoverable_error(exc: BaseException) -> BaseException:
    """``exc`` as the runtime's recoverable error when it is a TensorFlow error that
    carried one out of a graph (tf.numpy_function keeps only its name and message);
    ``exc`` itself otherwise."""
    if isinstance(exc, tf.errors.OpError) and not isinstance(exc, CollectiveError) and \
            any(f"{name}:" in (exc.message or "") for name in RECOVERABLE_NAMES):
        error = PeerFailureError(exc.message)
        error.__cause__ = exc
        return error
    return exc


def _reset() -> None:
    basics.shutdown()
    basics.init()


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate ``func(state, ...)`` (Horovod's ``hvd.elastic.run``); see the module's
    docstring."""
    def unwrapped(state: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return func(state, *args, **kwargs)
        except tf.errors.OpError as exc:
            error = recoverable_error(exc)
            if error is exc:
                raise
            raise error from exc
    unwrapped.__name__ = getattr(func, "__name__", "train")
    unwrapped.__doc__ = func.__doc__
    return run_fn(unwrapped, _reset)


__all__ = ["HostUpdateResult", "HostsUpdatedInterrupt", "ObjectState", "RendezvousLost",
           "State", "TensorFlowKerasState", "TensorFlowState", "WorkerRemoved",
           "recoverable_error", "run"]
