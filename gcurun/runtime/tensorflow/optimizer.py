"""The TF1 side: DistributedOptimizer over ``tf.compat.v1.train.Optimizer``,
broadcast_global_variables and BroadcastGlobalVariablesHook (for MonitoredTrainingSession).

``DistributedOptimizer`` also takes a Keras optimizer, which it hands to
``gcurun.runtime.tensorflow.keras.DistributedOptimizer``, as Horovod does.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from gcurun.runtime.tensorflow.aggregation import LocalAggregation
from gcurun.runtime.tensorflow.compression import Compression, Compressor
from gcurun.runtime.tensorflow.functions import broadcast_variables
from gcurun.runtime.tensorflow.gradients import Reduction, reduce_gradients, split_groups
from gcurun.runtime.tensorflow.mpi_ops import Adasum, Average
from gcurun.runtime.tensorflow.process_sets import global_process_set, set_size
from gcurun.runtime.tensorflow.util import var_key

_LegacyOptimizer: Any = tf.compat.v1.train.Optimizer


class _DistributedOptimizer(_LegacyOptimizer):
    """A TF1 optimizer that averages gradients over the ranks in ``compute_gradients``
    (so ``minimize`` does too) before the wrapped optimizer applies them."""

    def __init__(self, optimizer: Any, name: str | None, use_locking: bool, how: Reduction,
                 backward_passes_per_step: int, average_aggregated_gradients: bool,
                 groups: Any, num_groups: int, scale_local_gradients: bool):
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}",
                         use_locking=use_locking)
        self._optimizer = optimizer
        self._reduction = how
        self._groups = groups
        self._num_groups = num_groups
        self._scale_local = scale_local_gradients
        self._local_vars: set[Any] = set()
        self._aggregation = None
        if backward_passes_per_step > 1:
            self._aggregation = LocalAggregation(backward_passes_per_step,
                                                 average_aggregated_gradients, self._reduce)
        self._variables: list[Any] = []

    def register_local_var(self, var: Any) -> None:
        """Keep ``var``'s gradient on this rank (model-parallel parts)."""
        self._local_vars.add(var_key(var))

    def compute_gradients(self, *args: Any, **kwargs: Any) -> list[tuple[Any, Any]]:
        """The wrapped optimizer's gradients, averaged over the ranks (with
        ``backward_passes_per_step``, accumulated locally first)."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = (list(x) for x in zip(*pairs, strict=True))
        self._variables = variables
        if self._aggregation is not None:
            grads = self._aggregation.compute_gradients(grads, variables)
        else:
            grads = self._reduce(grads)
        return list(zip(grads, variables, strict=True))

    def _reduce(self, grads: list[Any]) -> list[Any]:
        variables = self._variables
        keys = [var_key(v) for v in variables]
        local = [i for i, k in enumerate(keys) if k in self._local_vars]
        shared = [i for i in range(len(grads)) if i not in set(local)]
        positions = {keys[i]: n for n, i in enumerate(shared)}
        groups = split_groups(len(shared), self._groups, self._num_groups,
                              lambda v: positions.get(var_key(v)))
        reduced = reduce_gradients([grads[i] for i in shared], self._reduction,
                                   name=f"{self._name}_Allreduce", groups=groups)
        results = list(grads)
        for i, value in zip(shared, reduced, strict=True):
            results[i] = value
        size = set_size(self._reduction.process_set)
        if self._scale_local and size > 1:
            for i in local:
                if results[i] is not None:
                    results[i] = results[i] / tf.cast(size, results[i].dtype)
        return results

    def apply_gradients(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped optimizer's ``apply_gradients`` (with ``backward_passes_per_step``,
        only on the steps that reduced)."""
        if self._aggregation is None:
            return self._optimizer.apply_gradients(*args, **kwargs)
        grads_and_vars = list(args[0] if args else kwargs["grads_and_vars"])
        global_step = kwargs.get("global_step", args[1] if len(args) > 1 else None)
        rest = args[1:] if args else ()
        others = {k: v for k, v in kwargs.items() if k != "grads_and_vars"}
        return self._aggregation.apply_gradients(
            lambda: self._optimizer.apply_gradients(grads_and_vars, *rest, **others),
            grads_and_vars, global_step)

    def get_slot(self, *args: Any, **kwargs: Any) -> Any:
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args: Any, **kwargs: Any) -> Any:
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args: Any, **kwargs: Any) -> Any:
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer: Any, name: str | None = None, use_locking: bool = False,
                         device_dense: str = "", device_sparse: str = "",
                         compression: type[Compressor] = Compression.none,
                         sparse_as_dense: bool = False, backward_passes_per_step: int = 1,
                         op: Any = Average, gradient_predivide_factor: float = 1.0,
                         average_aggregated_gradients: bool = False, num_groups: int = 0,
                         groups: Any = None, process_set: Any = global_process_set,
                         scale_local_gradients: bool = True) -> Any:
    """Wrap ``optimizer`` so that it applies gradients averaged over the ranks.

    A ``tf.compat.v1.train.Optimizer`` becomes a TF1 optimizer whose
    ``compute_gradients`` (and so ``minimize``) reduces the gradients, a step's gradients
    together; a Keras optimizer goes to ``gcurun.runtime.tensorflow.keras``.
    ``backward_passes_per_step`` accumulates that many steps locally before reducing
    (``average_aggregated_gradients`` divides the sum by their number); ``op`` is
    Average or Sum; ``gradient_predivide_factor`` splits the averaging around the sum;
    ``groups`` (a count, or lists of variables) splits the reduction into several ops.
    """
    if backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step={backward_passes_per_step}: must be 1 "
                         "or more")
    if op == Adasum:
        raise NotImplementedError("op=Adasum is not supported by gcurun's TensorFlow "
                                  "binding; use op=Average or op=Sum")
    if isinstance(optimizer, _LegacyOptimizer):
        how = Reduction(compression, sparse_as_dense, op, gradient_predivide_factor,
                        process_set, device_dense, device_sparse).check()
        return _DistributedOptimizer(optimizer, name, use_locking, how,
                                     backward_passes_per_step, average_aggregated_gradients,
                                     groups, num_groups, scale_local_gradients)
    # Imported here: Keras loads only for a Keras optimizer (the module, not the package,
    # so that the Keras binding's imports run one way: keras -> this module).
    from gcurun.runtime.tensorflow.keras import optimizer as keras_optimizer

    if isinstance(optimizer, keras_optimizer.keras_optimizer_class()):
        return keras_optimizer.DistributedOptimizer(
            optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
            compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
            groups=groups, process_set=process_set,
            scale_local_gradients=scale_local_gradients)
    raise ValueError(f"DistributedOptimizer: {optimizer!r} is neither a "
                     "tf.compat.v1.train.Optimizer nor a Keras optimizer; wrap one of those")


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Broadcasts every global variable from ``root_rank`` when a (monitored) session is
    created: after initialization or after restoring a checkpoint on the root, so every
    rank starts from the same values."""

    def __init__(self, root_rank: int, device: str = "",
                 process_set: Any = global_process_set):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.process_set = process_set
        self.bcast_op: Any = None

    def begin(self) -> None:
        graph = tf.compat.v1.get_default_graph()
        if self.bcast_op is None or self.bcast_op.graph is not graph:
            with tf.device(self.device):
                self.bcast_op = broadcast_variables(tf.compat.v1.global_variables(),
                                                    self.root_rank, self.process_set)

    def after_create_session(self, session: Any, coord: Any) -> None:
        session.run(self.bcast_op)
