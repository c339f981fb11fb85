"""Training state that ranks commit, restore and synchronize (Horovod's elastic state
objects, ``hvd.elastic.TensorFlowState`` and ``TensorFlowKerasState``).

gcurun does not re-form a job yet: :func:`run` synchronizes the state from rank 0 and
calls the training function once; a failed rank ends the job. The state objects work
as in Horovod: ``commit()`` takes a snapshot, ``restore()`` returns to it, ``sync()``
gives every rank rank 0's values and snapshots them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

import gcurun.runtime as runtime
from gcurun.runtime.tensorflow.functions import broadcast_object, broadcast_variables


class ObjectState:
    """Named Python values (``ObjectState(epoch=0, batch=0)``) as attributes, snapshot by
    :meth:`save`/:meth:`commit`, returned to by :meth:`restore`."""

    def __init__(self, **kwargs: Any):
        self._saved_state = dict(kwargs)
        self._reset_callbacks: list[Callable[[], None]] = []
        self._set_attrs()

    def _set_attrs(self) -> None:
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)

    def register_reset_callbacks(self, callbacks: Sequence[Callable[[], None]]) -> None:
        """Functions called after the state was restored and synchronized on a reset."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        self.restore()
        self.sync()
        for callback in self._reset_callbacks:
            callback()

    def save(self) -> None:
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}

    def restore(self) -> None:
        self._set_attrs()

    def commit(self) -> None:
        """Snapshot the state: a later :meth:`restore` returns to it."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Nothing to check: gcurun does not change a job's hosts while it runs."""

    def sync(self) -> None:
        """Make every rank's values rank 0's, and snapshot them."""
        if self._saved_state:
            self._saved_state = broadcast_object(self._saved_state, 0,
                                                 name="gcurun.elastic.state")
            self._set_attrs()


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
    """:class:`TensorFlowState` of a Keras model's and its optimizer's variables."""

    def __init__(self, model: Any, optimizer: Any = None, backend: Any = None,
                 **kwargs: Any):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else model.optimizer
        variables = list(model.variables)
        if self.optimizer is not None:
            found = self.optimizer.variables
            variables += list(found() if callable(found) else found)
        super().__init__(variables, **kwargs)


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a training function taking the state first: the state is synchronized
    from rank 0, then the function runs."""
    @functools.wraps(func)
    def wrapper(state: ObjectState, *args: Any, **kwargs: Any) -> Any:
        if not runtime.is_initialized():
            raise runtime.NotInitializedError("elastic.run")
        state.sync()
        return func(state, *args, **kwargs)
    return wrapper
