"""DistributedGradientTape: a ``tf.GradientTape`` whose gradients are averaged over the
ranks; PartialDistributedGradientTape: the same, with some layers kept local."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import tensorflow as tf

from gcurun.runtime.tensorflow.compression import Compression, Compressor
from gcurun.runtime.tensorflow.gradients import Reduction, reduce_gradients, split_groups
from gcurun.runtime.tensorflow.mpi_ops import Average
from gcurun.runtime.tensorflow.process_sets import global_process_set, set_size
from gcurun.runtime.tensorflow.util import var_key


class _DistributedGradientTape(tf.GradientTape):
    """What DistributedGradientTape adds to the wrapped tape's class; instances are made
    by :func:`DistributedGradientTape`, sharing the wrapped tape's recording."""

    def _distribute(self, how: Reduction, groups: Any, num_groups: int,
                    scale_local_gradients: bool) -> None:
        self._reduction = how
        self._groups = groups
        self._num_groups = num_groups
        self._scale_local = scale_local_gradients
        self._local_sources: set[Any] = set()

    def register_local_source(self, source: Any) -> None:
        """Keep ``source``'s gradient on this rank (not reduced; divided by the number of
        ranks when ``scale_local_gradients``): for model-parallel parts."""
        self._local_sources.add(var_key(source))

    def register_local_sources(self, sources: Iterable[Any]) -> None:
        for source in sources:
            self.register_local_source(source)

    def gradient(self, target: Any, sources: Any, output_gradients: Any = None,
                 use_generic_names: bool = False, **kwargs: Any) -> Any:
        """The gradients of ``target`` with respect to ``sources``, averaged over the
        ranks (in the structure of ``sources``, None where there is none)."""
        grads = super().gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        reduced = self._reduce(flat_sources, flat_grads)
        return tf.nest.pack_sequence_as(grads, reduced, expand_composites=False)

    def get_local_and_global_gradients(self, target: Any, sources: Sequence[Any],
                                       output_gradients: Any = None,
                                       **kwargs: Any) -> tuple[list[Any], list[Any]]:
        """(local, global) lists of (variable, gradient): the registered local sources'
        and the others' (averaged over the ranks)."""
        sources = list(sources)
        grads = self.gradient(target, sources, output_gradients, **kwargs)
        local: list[Any] = []
        shared: list[Any] = []
        for source, grad in zip(sources, grads, strict=True):
            (local if var_key(source) in self._local_sources else shared).append((source, grad))
        return local, shared

    def _reduce(self, sources: list[Any], grads: list[Any]) -> list[Any]:
        local = [i for i, s in enumerate(sources) if var_key(s) in self._local_sources]
        shared = [i for i in range(len(sources)) if i not in set(local)]
        results = list(grads)
        positions = {var_key(sources[i]): n for n, i in enumerate(shared)}
        groups = split_groups(len(shared), self._groups, self._num_groups,
                              lambda v: positions.get(var_key(v)))
        reduced = reduce_gradients([grads[i] for i in shared], self._reduction,
                                   groups=groups)
        for i, value in zip(shared, reduced, strict=True):
            results[i] = value
        if self._scale_local:
            size = set_size(self._reduction.process_set)
            for i in local:
                if results[i] is not None and size > 1:
                    results[i] = _divide(results[i], size)
        return results


def _divide(grad: Any, size: int) -> Any:
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / tf.cast(size, grad.values.dtype), grad.indices,
                                grad.dense_shape)
    return grad / tf.cast(size, grad.dtype)


def DistributedGradientTape(gradtape: tf.GradientTape, device_dense: str = "",
                            device_sparse: str = "",
                            compression: type[Compressor] = Compression.none,
                            sparse_as_dense: bool = False, op: Any = Average,
                            gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                            groups: Any = None, process_set: Any = global_process_set,
                            scale_local_gradients: bool = True) -> Any:
    """Wrap ``gradtape`` so that ``gradient()`` returns gradients averaged over the ranks
    (``op=Sum`` sums them). The result is an instance of the tape's class recording the
    same operations. A step's gradients are reduced together, as one op (``groups``, a
    count or lists of variables, splits them). ``compression`` (``Compression.fp16``)
    shrinks what is sent; ``sparse_as_dense`` reduces IndexedSlices densely."""
    how = Reduction(compression, sparse_as_dense, op, gradient_predivide_factor,
                    process_set, device_dense, device_sparse).check()
    cls = type(gradtape.__class__.__name__, (_DistributedGradientTape, gradtape.__class__),
               {"__module__": gradtape.__class__.__module__})
    tape: Any = object.__new__(cls)
    tape.__dict__.update(gradtape.__dict__)
    tape._distribute(how, groups, num_groups, scale_local_gradients)
    return tape


def PartialDistributedGradientTape(gradtape: tf.GradientTape, device_dense: str = "",
                                   device_sparse: str = "",
                                   compression: type[Compressor] = Compression.none,
                                   sparse_as_dense: bool = False, op: Any = Average,
                                   gradient_predivide_factor: float = 1.0,
                                   num_groups: int = 0, groups: Any = None,
                                   process_set: Any = global_process_set,
                                   local_layers: Any = None,
                                   scale_local_gradients: bool = True) -> Any:
    """:func:`DistributedGradientTape` whose ``local_layers`` (Keras layers: a list, or
    one) keep their gradients local."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor,
                                   num_groups, groups, process_set, scale_local_gradients)
    if local_layers is None:
        local_layers = []
    elif not isinstance(local_layers, (list, tuple)):
        local_layers = [local_layers]
    for layer in local_layers:
        if not hasattr(layer, "trainable_weights"):
            raise ValueError(f"local_layers: {layer!r} is not a Keras layer; pass the "
                             "layers whose weights stay local")
        tape.register_local_sources(layer.trainable_weights)
    return tape
