"""Model and optimizer state across ranks: broadcast_parameters, broadcast_optimizer_state,
and Python objects (broadcast_object, allgather_object)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from gcurun.runtime.torch.mpi_ops import broadcast_async_, synchronize
from gcurun.runtime.torch.process_sets import ProcessSet, global_process_set, target
from gcurun.runtime.torch.targets import SetTarget


def broadcast_parameters(params: Mapping[str, Any] | Iterable[Any], root_rank: int,
                         process_set: ProcessSet = global_process_set) -> None:
    """Copy ``root_rank``'s tensors into every rank's, in place: a ``state_dict()`` (its
    entries in key order), ``named_parameters()`` or ``parameters()``. Entries that are
    not tensors (a module's extra state) are left alone."""
    if isinstance(params, Mapping):
        items = sorted(params.items(), key=lambda item: str(item[0]))
    elif isinstance(params, Iterable) and not isinstance(params, torch.Tensor):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(f"broadcast_parameters: params of type {type(params).__name__} are "
                         "not supported; pass model.state_dict(), model.named_parameters() "
                         "or model.parameters()")
    handles = [broadcast_async_(tensor, root_rank, None if name is None else str(name),
                                process_set)
               for name, tensor in items if isinstance(tensor, torch.Tensor)]
    for handle in handles:
        synchronize(handle)


def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """``root_rank``'s Python object (pickled) on every rank."""
    where = target(process_set)
    root = root_rank
    if isinstance(where, SetTarget):
        ranks = process_set.ranks or []
        if root_rank not in ranks:
            raise ValueError(f"root_rank={root_rank} is not a member of {process_set}")
        root = ranks.index(root_rank)
    return where.broadcast_object(obj, root, name)


def allgather_object(obj: Any, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> list[Any]:
    """Every rank's Python object (pickled), as a list in rank order."""
    return target(process_set).allgather_object(obj, name)


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int,
                              process_set: ProcessSet = global_process_set) -> None:
    """Make every rank's optimizer state ``root_rank``'s: its per-parameter state (tensors
    in place, other values such as step counts as objects) and every option of its
    parameter groups (learning rate, momentum, ...).

    An optimizer that has no state yet gets it from one step with zero gradients first,
    which leaves the parameters and their gradients as they were.
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("broadcast_optimizer_state: torch.optim.LBFGS keeps state that "
                         "cannot be broadcast piecewise; broadcast_object(optimizer."
                         "state_dict()) and load_state_dict() it instead")
    if not any(optimizer.state.get(p) for g in optimizer.param_groups for p in g["params"]):
        _initialize_state(optimizer)
    tensors: list[tuple[str, torch.Tensor]] = []
    scalars: dict[str, Any] = {}
    assign: dict[str, Callable[[Any], None]] = {}
    occurrences: defaultdict[str, int] = defaultdict(int)
    for index, group in enumerate(optimizer.param_groups):
        for option in sorted(group):
            if option != "params":
                key = f"{option}.{index}"
                scalars[key] = group[option]
                assign[key] = _setter(group, option)
        for param in group["params"]:
            state = optimizer.state.get(param)
            for entry in sorted(state or {}):
                occurrences[entry] += 1
                key = f"{entry}.{occurrences[entry]}"
                value = state[entry]
                if isinstance(value, torch.Tensor):
                    tensors.append((key, value))
                else:
                    scalars[key] = value
                    assign[key] = _setter(state, entry)
    broadcast_parameters(tensors, root_rank, process_set)
    received = broadcast_object(scalars, root_rank, "broadcast_optimizer_state.scalars",
                                process_set)
    for key, value in received.items():
        if key in assign:
            assign[key](value)


def _setter(mapping: dict, key: Any) -> Callable[[Any], None]:
    def set_value(value: Any) -> None:
        mapping[key] = value
    return set_value


def _initialize_state(optimizer: torch.optim.Optimizer) -> None:
    """Create the optimizer's state with one step on zero gradients, then put back the
    parameters and gradients (a weight decay would otherwise move the parameters)."""
    params = [p for group in optimizer.param_groups for p in group["params"]
              if p.requires_grad]
    saved = [(p, p.detach().clone(), p.grad) for p in params]
    for p in params:
        grad = torch.zeros_like(p)
        p.grad = grad.to_sparse() if isinstance(optimizer, torch.optim.SparseAdam) else grad
    local_step = getattr(optimizer, "_local_step", None)
    with torch.no_grad():
        (local_step or optimizer.step)()
        for p, value, grad in saved:
            p.copy_(value)
            p.grad = grad
