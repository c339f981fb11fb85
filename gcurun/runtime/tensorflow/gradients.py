"""The reduction of a step's gradients, which DistributedGradientTape and both
DistributedOptimizers share.

A step's gradients are reduced together: the dense ones as one grouped allreduce (one
negotiation, fused into as few ring passes as the fusion threshold allows, and in a
graph a single enqueue op and a single synchronize op), the IndexedSlices gathered
together, unless ``sparse_as_dense`` makes them dense. ``groups`` splits them into
several such ops instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from gcurun.runtime.tensorflow.compression import Compression, Compressor
from gcurun.runtime.tensorflow.mpi_ops import Adasum, Average
from gcurun.runtime.tensorflow.process_sets import global_process_set, set_size
from gcurun.runtime.tensorflow.reduce import grouped_allreduce


@dataclass(frozen=True)
class Reduction:
    """How gradients are reduced (DistributedOptimizer's and the tape's options)."""

    compression: type[Compressor] = Compression.none
    sparse_as_dense: bool = False
    op: Any = Average
    gradient_predivide_factor: float = 1.0
    process_set: Any = global_process_set
    device_dense: str = ""
    device_sparse: str = ""

    def check(self) -> Reduction:
        """Raise ValueError for options that contradict each other."""
        if self.gradient_predivide_factor != 1.0 and self.op != Average:
            raise ValueError(f"gradient_predivide_factor={self.gradient_predivide_factor} "
                             "applies to op=Average only; drop it or use op=Average")
        if self.gradient_predivide_factor <= 0:
            raise ValueError(f"gradient_predivide_factor={self.gradient_predivide_factor}: "
                             "must be positive")
        return self

    @property
    def scale(self) -> tuple[float, float]:
        """(prescale, postscale): averaging split around the sum by the predivide factor."""
        factor = self.gradient_predivide_factor
        return (1.0 / factor, factor) if factor != 1.0 else (1.0, 1.0)


def reduce_gradients(grads: Sequence[Any], how: Reduction, name: str | None = None,
                     groups: Sequence[Sequence[int]] | None = None,
                     postscale: float = 1.0) -> list[Any]:
    """``grads`` reduced over the ranks of ``how.process_set`` (None entries stay None).
    ``groups`` lists positions reduced together (by default all in one group);
    ``postscale`` multiplies the results (gradient accumulation's sum)."""
    grads = list(grads)
    included = getattr(how.process_set, "included", None)
    if callable(included) and included() is False:
        return grads              # not a member: its gradients stay its own (Horovod's)
    if how.op == Adasum:
        raise NotImplementedError("op=Adasum is not supported by gcurun's TensorFlow "
                                  "binding; use Average or Sum")
    if set_size(how.process_set) == 1 and postscale == 1.0 and how.op == Average:
        return grads
    if how.sparse_as_dense:
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                 for g in grads]
    present = [i for i, g in enumerate(grads) if g is not None]
    if groups is None:
        groups = [present]
    results = list(grads)
    for number, group in enumerate(groups):
        label = None if name is None else (name if len(groups) == 1 else f"{name}.{number}")
        dense = [i for i in group if grads[i] is not None
                 and not isinstance(grads[i], tf.IndexedSlices)]
        sparse = [i for i in group if isinstance(grads[i], tf.IndexedSlices)]
        for members, suffix in ((dense, ""), (sparse, ".sparse")):
            if members:
                reduced = _reduce(grads, members, how, postscale,
                                  None if label is None else label + suffix)
                for i, value in zip(members, reduced, strict=True):
                    results[i] = value
    return results


def _reduce(grads: Sequence[Any], members: Sequence[int], how: Reduction, postscale: float,
            name: str | None) -> list[Any]:
    """One grouped allreduce of ``grads[members]``: dense ones with the scale factors
    in the reduction, IndexedSlices (gathered, which takes none) scaled afterwards."""
    pre, post = how.scale
    sparse = isinstance(grads[members[0]], tf.IndexedSlices)
    reduced = grouped_allreduce(
        [grads[i] for i in members], device_dense=how.device_dense,
        device_sparse=how.device_sparse, compression=how.compression, op=how.op,
        prescale_factor=1.0 if sparse else pre,
        postscale_factor=1.0 if sparse else post * postscale,
        process_set=how.process_set, name=name)
    if not sparse or postscale == 1.0:
        return reduced
    return [tf.IndexedSlices(v.values * tf.cast(postscale, v.values.dtype), v.indices,
                             v.dense_shape) for v in reduced]


def split_groups(count: int, groups: Any, num_groups: int,
                 position_of: Any = None) -> list[list[int]] | None:
    """Positions of ``count`` gradients reduced together: None (one group) without
    ``groups``/``num_groups``; ``num_groups`` (or an integer ``groups``) consecutive
    slices; or lists of variables (``position_of(variable)`` gives its position), every
    variable in no list going alone."""
    if num_groups and groups is None:
        groups = num_groups
    if not groups:
        return None
    if isinstance(groups, int):
        if groups < 1:
            raise ValueError(f"groups={groups}: give a count of 1 or more, or lists of "
                             "variables")
        parts = min(groups, max(count, 1))
        size, extra = divmod(count, parts)
        bounds = [i * size + min(i, extra) for i in range(parts + 1)]
        return [list(range(a, b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    if position_of is None:
        raise ValueError("groups of variables need the variables the gradients belong to")
    result: list[list[int]] = []
    seen: set[int] = set()
    for group in groups:
        positions = [position_of(v) for v in group]
        if any(p is None for p in positions):
            raise ValueError("groups: every variable of a group must be one whose gradient "
                             "is reduced")
        if seen & set(positions):
            raise ValueError("groups: a variable appears in more than one group")
        seen |= set(positions)
        result.append(positions)
    result.extend([i] for i in range(count) if i not in seen)
    return result
