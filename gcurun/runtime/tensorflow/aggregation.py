"""Local gradient aggregation for the TF1 DistributedOptimizer (``backward_passes_per_step``).

Each call of the step adds the gradients into local accumulator variables and counts;
every ``backward_passes_per_step``-th call reduces the accumulated gradients over the
ranks (averaged over the passes when ``average_aggregated_gradients``), resets the
accumulators, and only then does ``apply_gradients`` apply them; the calls in between
apply nothing (but still advance ``global_step``). The accumulators are local variables
(``tf.compat.v1.local_variables_initializer`` and monitored sessions initialize them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from gcurun.runtime.tensorflow.util import var_key

LOCAL = tf.compat.v1.GraphKeys.LOCAL_VARIABLES


class LocalAggregation:
    """The accumulators and counter of one optimizer (see the module docstring)."""

    def __init__(self, passes: int, average: bool,
                 reduce: Callable[[list[Any]], list[Any]]):
        """``reduce`` takes and returns a list of gradients in the variables' order
        (None for those without one)."""
        self.passes = passes
        self.average = average
        self.reduce = reduce
        self.counter: tf.Variable | None = None
        self._sums: dict[Any, tf.Variable] = {}

    def _variable(self, initial: Any, name: str) -> tf.Variable:
        with tf.init_scope():
            return tf.compat.v1.Variable(initial, trainable=False, name=name,
                                         collections=[LOCAL], use_resource=True)

    def compute_gradients(self, grads: Sequence[Any], variables: Sequence[Any]) -> list[Any]:
        """Add ``grads`` to the accumulators; on every ``passes``-th call return the
        reduced accumulated gradients (else the local ones, which are not applied)."""
        if self.counter is None:
            self.counter = self._variable(tf.zeros([], tf.int32), "aggregation_counter")
        counter = self.counter
        present = [(i, tf.convert_to_tensor(g)) for i, g in enumerate(grads) if g is not None]
        sums = []
        for i, grad in present:
            key = var_key(variables[i])
            if key not in self._sums:
                self._sums[key] = self._variable(tf.zeros(grad.shape, grad.dtype),
                                                 "aggregated_gradient")
            sums.append(self._sums[key])
        added = [total.assign_add(grad) for total, (_, grad) in zip(sums, present,
                                                                       strict=True)]
        with tf.control_dependencies(added):
            count = counter.assign_add(1)

        def reduce_and_reset() -> list[Any]:
            totals = [total.read_value() for total in sums]
            if self.average:
                totals = [t / tf.cast(self.passes, t.dtype) for t in totals]
            full: list[Any] = [None] * len(grads)
            for (i, _), total in zip(present, totals, strict=True):
                full[i] = total
            every = self.reduce(full)
            reduced = [every[i] for i, _ in present]
            with tf.control_dependencies(reduced):
                resets = [total.assign(tf.zeros_like(total)) for total in sums]
                resets.append(counter.assign(0))
            with tf.control_dependencies(resets):
                return [tf.identity(r) for r in reduced]

        def local() -> list[Any]:
            return [tf.identity(grad) for _, grad in present]

        outputs = tf.cond(tf.equal(count, self.passes), reduce_and_reset, local) \
            if present else []
        results: list[Any] = [None] * len(grads)
        for (i, _), value in zip(present, outputs, strict=True):
            results[i] = value
        return results

    def apply_gradients(self, apply: Callable[[], Any], grads_and_vars: Sequence[Any],
                        global_step: Any = None) -> Any:
        """``apply()`` when the last compute_gradients reduced, else only advance
        ``global_step``; returns the op."""
        if self.counter is None:
            raise ValueError("apply_gradients() before compute_gradients(): with "
                             "backward_passes_per_step > 1 the gradients must come from "
                             "the DistributedOptimizer's compute_gradients()")
        grads = [g for g, _ in grads_and_vars if g is not None]
        with tf.control_dependencies([g for g in grads if isinstance(g, tf.Tensor)]):
            def applied() -> tf.Tensor:
                with tf.control_dependencies([apply()]):
                    return tf.constant(True)

            def skipped() -> tf.Tensor:
                if global_step is None:
                    return tf.constant(False)
                with tf.control_dependencies([global_step.assign_add(1)]):
                    return tf.constant(False)

            done = tf.cond(tf.equal(self.counter.read_value(), 0), applied, skipped)
        return tf.group(done)
