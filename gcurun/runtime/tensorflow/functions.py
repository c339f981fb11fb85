"""Variables and Python objects across ranks: broadcast_variables, broadcast_object,
broadcast_object_fn, allgather_object."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import tensorflow as tf

import gcurun.runtime as runtime
from gcurun.errors import CollectiveError
from gcurun.runtime.tensorflow.errors import tf_error
from gcurun.runtime.tensorflow.mpi_ops import broadcast_
from gcurun.runtime.tensorflow.process_sets import global_process_set, set_kwargs


def broadcast_variables(variables: Iterable[Any], root_rank: int,
                        process_set: Any = global_process_set, inplace: bool = False) -> Any:
    """Give every rank ``root_rank``'s values of ``variables``, all in one op. Eagerly
    the variables are assigned at once; in a graph this returns the op that assigns
    them. ``inplace`` is accepted for Horovod's signature (the values are assigned in
    place either way)."""
    variables = list(variables)
    if not variables:
        return None if tf.executing_eagerly() else tf.no_op()
    assigned = broadcast_(variables, root_rank, None, process_set)
    if tf.executing_eagerly():
        return None
    return tf.group(*assigned)


def broadcast_object(obj: Any, root_rank: int = 0, session: Any = None,
                     name: str | None = None, process_set: Any = global_process_set) -> Any:
    """``root_rank``'s Python object (pickled) on every rank. It runs when called, in
    graph code too (``session`` is accepted for Horovod's signature)."""
    try:
        return runtime.broadcast_object(obj, root_rank, name, **set_kwargs(process_set))
    except CollectiveError as exc:
        raise tf_error(exc) from exc


def broadcast_object_fn(root_rank: int = 0, session: Any = None, name: str | None = None,
                        process_set: Any = global_process_set) -> Callable[[Any], Any]:
    """A function that broadcasts its argument from ``root_rank`` (Horovod's TF1 form)."""
    def fn(obj: Any) -> Any:
        return broadcast_object(obj, root_rank, session, name, process_set)
    return fn


def allgather_object(obj: Any, session: Any = None, name: str | None = None,
                     process_set: Any = global_process_set) -> list[Any]:
    """Every rank's Python object (pickled), as a list in rank order."""
    try:
        return runtime.allgather_object(obj, name, **set_kwargs(process_set))
    except CollectiveError as exc:
        raise tf_error(exc) from exc


def broadcast_global_variables(root_rank: int) -> Any:
    """The op that gives every rank ``root_rank``'s values of all global variables (TF1
    graphs; run it after the variables are initialized).

    Raises RuntimeError when executing eagerly: use broadcast_variables there."""
    if tf.executing_eagerly():
        raise RuntimeError("broadcast_global_variables() needs graph mode (TF1); in eager "
                           "code call broadcast_variables(model.variables, root_rank) and "
                           "the same for the optimizer's variables")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)
