"""DistributedOptimizer's arguments checked and put in order: the names of the
parameters its allreduces carry, and the groups of parameters reduced together."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

Group = tuple[torch.Tensor, ...]


def named_parameters_of(optimizer: torch.optim.Optimizer,
                        named_parameters: Iterable[tuple[str, torch.Tensor]] | None
                        ) -> list[tuple[str, torch.Tensor]]:
    """(name, parameter) of every parameter of ``optimizer`` that ``named_parameters``
    names (``allreduce.noname.I`` by position when it is None). Raises ValueError when
    the pairs are malformed, a name repeats, or a parameter of ``optimizer`` is unnamed.
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if named_parameters is None:
        return [(f"allreduce.noname.{i}", p) for i, p in enumerate(params)]
    named = list(named_parameters)
    if any(not isinstance(item, tuple) or len(item) != 2 for item in named):
        raise ValueError("named_parameters should be (name, parameter) pairs, as "
                         "model.named_parameters() gives")
    names = [name for name, _ in named]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"named_parameters: names must be unique; {', '.join(duplicates)} "
                         "appear more than once")
    known = {id(p) for _, p in named}
    unnamed = [i for i, p in enumerate(params) if id(p) not in known]
    if unnamed:
        raise ValueError(f"named_parameters does not name {len(unnamed)} of the optimizer's "
                         f"parameters (positions {unnamed[:8]} in its parameter groups); "
                         "pass model.named_parameters() of the model the optimizer trains")
    wanted = {id(p) for p in params}
    return [(name, p) for name, p in named if id(p) in wanted]


def parameter_groups(optimizer: torch.optim.Optimizer, named: list[tuple[str, torch.Tensor]],
                     groups: int | Sequence[Sequence[torch.Tensor]] | None) -> list[Group]:
    """Explicit groups of parameters whose gradients are reduced together: ``groups``
    as a count splits the trained parameters into that many runs. Raises ValueError for
    a negative count, a parameter the optimizer does not train, or one in two groups."""
    trained = [p for group in optimizer.param_groups for p in group["params"]
               if p.requires_grad]
    if not groups:
        return []
    if isinstance(groups, int):
        if groups < 0:
            raise ValueError(f"groups={groups}: give a count of 1 or more, or lists of "
                             "parameters")
        count = min(groups, len(trained))
        size, extra = divmod(len(trained), count)
        bounds = [i * size + min(i, extra) for i in range(count + 1)]
        return [tuple(trained[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
    ids = {id(p) for p in trained}
    result = []
    for group in groups:
        members = tuple(group)
        if any(id(p) not in ids for p in members):
            raise ValueError("groups: every parameter of a group must be one the optimizer "
                             "trains (requires_grad)")
        if members:
            result.append(members)
    seen = [id(p) for group in result for p in group]
    if len(seen) != len(set(seen)):
        raise ValueError("groups: a parameter appears in more than one group")
    return result
