"""Model and optimizer state across ranks: broadcast_parameters, broadcast_optimizer_state,
and Python objects (broadcast_object, allgather_object)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

import gcurun.runtime as runtime
from gcurun.runtime.torch.mpi_ops import broadcast_async_, synchronize
from gcurun.runtime.torch.process_sets import ProcessSet, global_process_set, member_set


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
    return runtime.broadcast_object(obj, root_rank, name=name,
                                    process_set=member_set(process_set, "broadcast_object"))


def allgather_object(obj: Any, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> list[Any]:
    """Every rank's Python object (pickled), as a list in rank order."""
    return runtime.allgather_object(obj, name=name,
                                    process_set=member_set(process_set, "allgather_object"))


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int,
                              process_set: ProcessSet = global_process_set) -> None:
    """Make every rank's optimizer state ``root_rank``'s: the options of its parameter
    groups (learning rate, momentum, ...) and each parameter's state, tensors broadcast
    in place and other values (step counts, flags) as objects. A rank whose state lacks an
    entry the root has (a fresh optimizer) gets it; entries the root lacks are dropped.
    Every rank's optimizer must train the same parameters in the same groups.

    On a rank whose optimizer is fresh (no state yet), trainable parameters without a
    gradient get a zero one, as after Horovod's call; unlike Horovod, no optimizer step
    is taken to create state (with weight decay or momentum that step would move the
    parameters before training starts).
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("broadcast_optimizer_state: torch.optim.LBFGS keeps state that "
                         "cannot be broadcast piecewise; broadcast_object(optimizer."
                         "state_dict()) and load_state_dict() it instead")
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not any(optimizer.state.get(p) for p in params):
        _zero_missing_grads(params)
    offer = _manifest(optimizer, params) if _is_root(root_rank, process_set) else None
    manifest = broadcast_object(offer, root_rank, "broadcast_optimizer_state.manifest",
                                process_set)
    groups, states = manifest
    if len(groups) != len(optimizer.param_groups) or len(states) != len(params):
        raise ValueError(f"broadcast_optimizer_state: rank {root_rank}'s optimizer has "
                         f"{len(groups)} parameter groups and {len(states)} parameters, "
                         f"this rank's {len(optimizer.param_groups)} and {len(params)}; "
                         "build the same optimizer over the same model on every rank")
    if offer is None:
        for group, options in zip(optimizer.param_groups, groups, strict=True):
            group.update(options)
        for param, entries in zip(params, states, strict=True):
            _adopt(optimizer, param, entries)
    tensors = [(f"optimizer_state.{i}.{key}", optimizer.state[p][key])
               for i, (p, entries) in enumerate(zip(params, states, strict=True))
               for key, (kind, _) in entries.items() if kind == "tensor"]
    broadcast_parameters(tensors, root_rank, process_set)


def _zero_missing_grads(params: list[torch.Tensor]) -> None:
    for param in params:
        if param.requires_grad and param.grad is None:
            param.grad = torch.zeros_like(param)


def _is_root(root_rank: int, process_set: ProcessSet) -> bool:
    member_set(process_set, "broadcast_optimizer_state")
    return runtime.rank() == root_rank


def _manifest(optimizer: torch.optim.Optimizer,
              params: list[torch.Tensor]) -> tuple[list[dict], list[dict]]:
    """The root's options and, per parameter, its state entries: tensors described by
    (shape, dtype, device type), other values as they are."""
    groups = [{k: v for k, v in group.items() if k != "params"}
              for group in optimizer.param_groups]
    states = []
    for param in params:
        entries: dict[str, tuple[str, Any]] = {}
        for key, value in (optimizer.state.get(param) or {}).items():
            if isinstance(value, torch.Tensor):
                entries[key] = ("tensor", (tuple(value.shape), value.dtype,
                                           value.device.type))
            else:
                entries[key] = ("value", value)
        states.append(entries)
    return groups, states


def _adopt(optimizer: torch.optim.Optimizer, param: torch.Tensor,
           entries: dict[str, tuple[str, Any]]) -> None:
    """Reshape this rank's state of ``param`` after the root's (values come later)."""
    if not entries:
        optimizer.state.pop(param, None)
        return
    old = optimizer.state.get(param) or {}
    new: dict[str, Any] = {}
    for key, (kind, what) in entries.items():
        if kind == "value":
            new[key] = what
            continue
        shape, dtype, device_type = what
        current = old.get(key)
        device = torch.device("cpu") if device_type == "cpu" else param.device
        if (isinstance(current, torch.Tensor) and tuple(current.shape) == shape
                and current.dtype == dtype and current.device == device):
            new[key] = current
        else:
            new[key] = torch.zeros(shape, dtype=dtype, device=device)
    optimizer.state[param] = new
