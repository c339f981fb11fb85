"""Re-arming a DistributedOptimizer for a new generation of an elastic job.

It decides at construction whether it communicates (``size() > 1``) and registers its
gradient hooks then; a job that grows from one rank, or a failure inside ``backward()``
that left allreduce handles half-set, needs both done again."""

from __future__ import annotations

from typing import Any


def rearm(optimizer: Any) -> None:
    """Forget in-flight gradient allreduces and counters of ``optimizer`` (a
    DistributedOptimizer; anything else is left alone) and decide again whether it
    communicates, registering its hooks when it starts to."""
    if not hasattr(optimizer, "_allreduce_delay") or not hasattr(optimizer, "_make_hook"):
        return
    optimizer._handles.clear()
    optimizer._filled.clear()
    for group in optimizer._group_ready:
        optimizer._group_ready[group] = 0
    optimizer._reset_delays()
    optimizer._synchronized = False
    optimizer._should_synchronize = True
    process_set = optimizer.process_set
    communicating = bool(process_set.included()) and (process_set.size() or 1) > 1
    if communicating and not optimizer._hooks:
        for p in optimizer._requires_update:
            optimizer._hooks.append(p.register_post_accumulate_grad_hook(
                optimizer._make_hook(p)))
    optimizer._communicating = communicating
    optimizer._overlap = communicating and bool(optimizer._hooks)
