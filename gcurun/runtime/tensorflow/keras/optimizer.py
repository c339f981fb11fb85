"""DistributedOptimizer for Keras optimizers: Keras 3's (``tf.keras`` on TensorFlow 2.16+)
and Keras 2's (tf-keras, ``tf.keras`` with ``TF_USE_LEGACY_KERAS=1``).

Keras 3 removed the hooks Horovod's wrapper used (``get_gradients``,
``_aggregate_gradients``); every path that updates weights (``model.fit``,
``apply_gradients``, ``apply``) goes through ``apply(grads, variables)``, which the
wrapper overrides: the gradients are averaged over the ranks, as one grouped op, before
the wrapped class applies them (clipping and weight decay come after, as in one process).

``backward_passes_per_step=N`` is the optimizer's own gradient accumulation
(``gradient_accumulation_steps=N``): Keras accumulates locally and applies every N-th
step; the reduction runs only on those steps, on the accumulated average (summed back
when ``average_aggregated_gradients`` is False, as in Horovod). It hooks
``_clip_gradients``, the one call Keras makes with the final gradients of an update step.

Keras 2's optimizers (both ``tf_keras.optimizers.Optimizer`` and the ``legacy`` ones) take
every update, ``model.fit``'s and ``minimize``'s too, through ``apply_gradients(pairs)``,
which the wrapper overrides the same way; ``compile(experimental_run_tf_function=False)``,
which Horovod's Keras 2 examples pass, changes nothing then. Keras 2's optimizers have no
gradient accumulation of their own, so ``backward_passes_per_step`` stays 1 with them.
"""

from __future__ import annotations

from typing import Any

from gcurun.runtime.tensorflow.compression import Compression, Compressor
from gcurun.runtime.tensorflow.gradients import Reduction, reduce_gradients, split_groups
from gcurun.runtime.tensorflow.keras._which import LEGACY, keras
from gcurun.runtime.tensorflow.mpi_ops import Adasum, Average
from gcurun.runtime.tensorflow.process_sets import global_process_set, set_size
from gcurun.runtime.tensorflow.util import var_key

_classes: dict[type, type] = {}


class _Reducing:
    """What DistributedOptimizer adds to either Keras's optimizers: the reduction."""

    _reduction: Reduction
    _passes: int
    _average_passes: bool
    _groups: Any
    _num_groups: int
    _scale_local: bool
    _local_keys: frozenset

    def _distribute(self, how: Reduction, passes: int, average_passes: bool, groups: Any,
                    num_groups: int, scale_local: bool) -> None:
        self._reduction = how
        self._passes = passes
        self._average_passes = average_passes
        self._groups = groups
        self._num_groups = num_groups
        self._scale_local = scale_local
        self._local_keys = frozenset()

    def register_local_var(self, var: Any) -> None:
        """Keep ``var``'s gradient on this rank (divided by the number of ranks when
        ``scale_local_gradients``): for model-parallel parts."""
        self._local_keys = self._local_keys | {var_key(var)}

    def _reduce(self, grads: list[Any], variables: list[Any] | None) -> list[Any]:
        keys = [var_key(v) for v in variables] if variables is not None else []
        local = {i for i, k in enumerate(keys) if k in self._local_keys}
        shared = [i for i in range(len(grads)) if i not in local]
        positions = {keys[i]: n for n, i in enumerate(shared)} if keys else {}
        groups = split_groups(len(shared), self._groups, self._num_groups,
                              (lambda v: positions.get(var_key(v))) if keys else None)
        postscale = 1.0 if self._passes == 1 or self._average_passes else float(self._passes)
        reduced = reduce_gradients([grads[i] for i in shared], self._reduction,
                                   name=f"{getattr(self, 'name', 'optimizer')}.gradients",
                                   groups=groups, postscale=postscale)
        results = list(grads)
        for i, value in zip(shared, reduced, strict=True):
            results[i] = value
        size = set_size(self._reduction.process_set)
        if self._scale_local and size > 1:
            for i in local:
                if results[i] is not None:
                    results[i] = results[i] / size
        return results


class _DistributedOptimizer(_Reducing):
    """The methods DistributedOptimizer puts before a Keras 3 optimizer's class."""

    def apply(self, grads: Any, trainable_variables: Any = None) -> Any:
        if self._passes == 1:
            variables = list(trainable_variables) if trainable_variables is not None \
                else list(self._trainable_variables)       # type: ignore[attr-defined]
            grads = self._reduce(list(grads), variables)
        return super().apply(grads, trainable_variables)  # type: ignore[misc]

    def _clip_gradients(self, grads: Any) -> Any:
        if self._passes > 1:
            grads = self._reduce(list(grads), None)
        return super()._clip_gradients(grads)  # type: ignore[misc]


class _DistributedOptimizer2(_Reducing):
    """The method DistributedOptimizer puts before a Keras 2 optimizer's class."""

    def apply_gradients(self, grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
        pairs = list(grads_and_vars)
        variables = [v for _, v in pairs]
        grads = self._reduce([g for g, _ in pairs], variables)
        return super().apply_gradients(  # type: ignore[misc]
            list(zip(grads, variables, strict=True)), *args, **kwargs)


def distributed_class(cls: type) -> Any:
    """The class of wrapped ``cls`` optimizers (one per class, so that ``isinstance``
    and saving see the wrapped class's name and module)."""
    found = _classes.get(cls)
    if found is None:
        ours = _DistributedOptimizer2 if LEGACY else _DistributedOptimizer
        found = _classes[cls] = type(cls.__name__, (ours, cls), {"__module__": cls.__module__})
    return found


def DistributedOptimizer(optimizer: Any, name: str | None = None, device_dense: str = "",
                         device_sparse: str = "",
                         compression: type[Compressor] = Compression.none,
                         sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                         op: Any = Average, backward_passes_per_step: int = 1,
                         average_aggregated_gradients: bool = False, num_groups: int = 0,
                         groups: Any = None, process_set: Any = global_process_set,
                         scale_local_gradients: bool = True) -> Any:
    """A copy of the Keras ``optimizer`` (its class and configuration, and its state
    when it has any) that applies gradients averaged over the ranks (``op=Sum`` sums).

    ``backward_passes_per_step`` accumulates that many steps locally before reducing
    and applying; ``compression`` (``Compression.fp16``) shrinks what is sent;
    ``sparse_as_dense`` reduces IndexedSlices densely; ``groups`` (a count, or lists of
    variables) splits a step's reduction into several ops.
    """
    if not isinstance(optimizer, keras_optimizer_class()):
        raise ValueError(f"DistributedOptimizer: {optimizer!r} is not an optimizer of the "
                         f"Keras that tf.keras is ({keras.__name__}.optimizers.Optimizer); a "
                         "tf.compat.v1.train.Optimizer goes to "
                         "gcurun.runtime.tensorflow.DistributedOptimizer")
    if op == Adasum:
        raise NotImplementedError("op=Adasum is not supported with Keras; use op=Average "
                                  "or op=Sum")
    if backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step={backward_passes_per_step}: must be 1 "
                         "or more")
    if LEGACY and backward_passes_per_step > 1:
        raise ValueError(f"backward_passes_per_step={backward_passes_per_step} with a Keras 2 "
                         "(tf-keras) optimizer: gcurun accumulates gradients through Keras 3's "
                         "gradient_accumulation_steps only; use Keras 3 (unset "
                         "TF_USE_LEGACY_KERAS) or backward_passes_per_step=1")
    if isinstance(optimizer, _Reducing):
        raise ValueError(f"{optimizer!r} is wrapped already; wrap the original "
                         "optimizer once")
    how = Reduction(compression, sparse_as_dense, op, gradient_predivide_factor,
                    process_set, device_dense, device_sparse).check()
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    if backward_passes_per_step > 1:
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            raise ValueError("backward_passes_per_step > 1 with a LossScaleOptimizer: give "
                             "its inner optimizer gradient_accumulation_steps instead, or "
                             "wrap without backward_passes_per_step")
        own = config.get("gradient_accumulation_steps")
        if own and own != backward_passes_per_step:
            raise ValueError(f"backward_passes_per_step={backward_passes_per_step} but the "
                             f"optimizer accumulates gradient_accumulation_steps={own}; "
                             "set one of them")
        config["gradient_accumulation_steps"] = backward_passes_per_step
    elif config.get("gradient_accumulation_steps"):
        backward_passes_per_step = int(config["gradient_accumulation_steps"])
        average_aggregated_gradients = True       # Keras' own accumulation averages
    wrapped = distributed_class(type(optimizer)).from_config(config)
    wrapped._distribute(how, backward_passes_per_step, average_aggregated_gradients, groups,
                        num_groups, scale_local_gradients)
    if not LEGACY and optimizer.built:
        _copy_state(optimizer, wrapped)
    return wrapped


def _copy_state(source: Any, target: Any) -> None:
    """Give ``target`` (unbuilt, same class) ``source``'s state: its variables of the
    same names (slots, the iteration count; gradient accumulators start at zero)."""
    target.build(list(source._trainable_variables))
    theirs: dict[str, list[Any]] = {}
    for var in source.variables:
        theirs.setdefault(var.name, []).append(var)
    for var in target.variables:
        found = theirs.get(var.name)
        if found:
            var.assign(found.pop(0))


def keras_optimizer_class() -> tuple[Any, ...]:
    """The optimizer classes of the Keras that tf.keras is (Keras 2 has two)."""
    if LEGACY:
        return keras.optimizers.Optimizer, keras.optimizers.legacy.Optimizer
    return (keras.optimizers.Optimizer,)
