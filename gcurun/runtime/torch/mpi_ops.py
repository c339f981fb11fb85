"""The collectives on torch tensors, with Horovod's names, arguments and results.

Every ``*_async`` function stages its tensors (:mod:`.tensors`), hands the host arrays to
the runtime (the engine of the job or of a process set) and returns an integer handle for
:func:`poll` and :func:`synchronize`. The synchronous forms synchronize at once; the
out-of-place ones are autograd functions, so gradients flow through them.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import gcurun.runtime as runtime
from gcurun.runtime import Adasum, Average, Max, Min, Product, Sum
from gcurun.runtime.torch import adasum
from gcurun.runtime.torch.compression import Compression, Compressor
from gcurun.runtime.torch.handles import Combined, poll, register, synchronize
from gcurun.runtime.torch.process_sets import ProcessSet, global_process_set, target
from gcurun.runtime.torch.tensors import stage, to_tensor, write_back

__all__ = [
    "Adasum", "Average", "Max", "Min", "Product", "Sum", "allgather", "allgather_async",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "alltoall",
    "alltoall_async", "barrier", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "grouped_allgather", "grouped_allgather_async", "grouped_allreduce",
    "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "grouped_reducescatter", "grouped_reducescatter_async", "join", "poll", "reducescatter",
    "reducescatter_async", "sparse_allreduce_async", "synchronize",
]


Tensors = Sequence[torch.Tensor]


def reduce_op(op: Any, average: bool | None) -> Any:
    """The op of a call that may use Horovod's deprecated ``average`` flag."""
    if op is not None and average is not None:
        raise ValueError("pass either op or the deprecated average flag, not both")
    if average is not None:
        warnings.warn("average= is deprecated; use op=Average or op=Sum", DeprecationWarning,
                      stacklevel=3)
        return Average if average else Sum
    return Average if op is None else op


def _wants_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in tensors)


def _as_tensors(results: Sequence[np.ndarray], like: Tensors) -> list[torch.Tensor]:
    return [to_tensor(result, t) for result, t in zip(results, like, strict=True)]


# -- allreduce ---------------------------------------------------------------------------


def _allreduce_async(tensor: torch.Tensor, inplace: bool, name: str | None, op: Any,
                     pre: float, post: float, process_set: ProcessSet) -> int:
    where = target(process_set)
    if op == Adasum:
        return adasum.allreduce_async(tensor, inplace, name, pre, post, where)
    staged = stage(tensor, "allreduce")
    if inplace:
        work = where.allreduce(staged.array, True, op, pre, post, name)
        return register(work, lambda _: write_back(staged), staged)
    if staged.copied:         # the host copy is private: reduce it in place
        work = where.allreduce(staged.array, True, op, pre, post, name)
        return register(work, lambda _: to_tensor(staged.array, tensor), staged)
    work = where.allreduce(staged.array, False, op, pre, post, name)
    return register(work, lambda result: to_tensor(result, tensor), staged)


def allreduce_async(tensor: torch.Tensor, average: bool | None = None,
                    name: str | None = None, op: Any = None, prescale_factor: float = 1.0,
                    postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start reducing ``tensor`` over the ranks (default op: Average); the result is a
    new tensor that :func:`synchronize` returns. ``tensor`` must not change until then."""
    return _allreduce_async(tensor, False, name, reduce_op(op, average), prescale_factor,
                            postscale_factor, process_set)


def allreduce_async_(tensor: torch.Tensor, average: bool | None = None,
                     name: str | None = None, op: Any = None, prescale_factor: float = 1.0,
                     postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set) -> int:
    """:func:`allreduce_async` whose result is written into ``tensor``."""
    return _allreduce_async(tensor, True, name, reduce_op(op, average), prescale_factor,
                            postscale_factor, process_set)


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None, op: Any, pre: float,
                post: float, process_set: ProcessSet) -> torch.Tensor:
        ctx.args = (op, pre, post, process_set)
        return synchronize(_allreduce_async(tensor, False, name, op, pre, post, process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        op, pre, post, process_set = ctx.args
        reduced = synchronize(_allreduce_async(grad.contiguous(), False, None, op, pre, post,
                                               process_set))
        return reduced, None, None, None, None, None


def allreduce(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
              compression: type[Compressor] = Compression.none, op: Any = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """The reduction of ``tensor`` over the ranks (default: the average), a new tensor
    of the same shape and dtype. Differentiable: the gradient is reduced the same way."""
    op = reduce_op(op, average)
    compressed, ctx = compression.compress(tensor)
    if _wants_grad(compressed):
        result = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor,
                                  process_set)
    else:
        result = synchronize(_allreduce_async(compressed, False, name, op, prescale_factor,
                                              postscale_factor, process_set))
    return compression.decompress(result, ctx)


def allreduce_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
               op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """:func:`allreduce` written into ``tensor``, which is returned."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _grouped_allreduce_async(tensors: Tensors, inplace: bool, name: str | None, op: Any,
                             pre: float, post: float,
                             process_set: ProcessSet) -> int:
    tensors = list(tensors)
    where = target(process_set)
    if op == Adasum:
        works = [adasum.work(t, inplace, pre, post, where,
                             None if name is None else f"{name}.{i}")
                 for i, t in enumerate(tensors)]
        finishers = [finish for _, finish, _ in works]
        return register(Combined([w for w, _, _ in works]),
                        lambda results: [f(r) for f, r in zip(finishers, results, strict=True)],
                        works)
    staged = [stage(t, "grouped_allreduce") for t in tensors]
    work = where.grouped_allreduce([s.array for s in staged], inplace, op, pre, post, name)
    if inplace:
        return register(work, lambda _: [write_back(s) for s in staged], staged)
    return register(work, lambda results: _as_tensors(results, tensors), staged)


def grouped_allreduce_async(tensors: Tensors, average: bool | None = None,
                            name: str | None = None, op: Any = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: ProcessSet = global_process_set) -> int:
    """Start reducing a list of tensors as one op; :func:`synchronize` returns the list
    of results."""
    return _grouped_allreduce_async(tensors, False, name, reduce_op(op, average),
                                    prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async_(tensors: Tensors, average: bool | None = None,
                             name: str | None = None, op: Any = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: ProcessSet = global_process_set) -> int:
    """:func:`grouped_allreduce_async` with the results written into ``tensors``."""
    return _grouped_allreduce_async(tensors, True, name, reduce_op(op, average),
                                    prescale_factor, postscale_factor, process_set)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, name: str | None, op: Any, pre: float, post: float,
                process_set: ProcessSet, *tensors: torch.Tensor) -> tuple[Any, ...]:
        ctx.args = (op, pre, post, process_set)
        return tuple(synchronize(_grouped_allreduce_async(tensors, False, name, op, pre, post,
                                                          process_set)))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        op, pre, post, process_set = ctx.args
        reduced = synchronize(_grouped_allreduce_async([g.contiguous() for g in grads], False,
                                                       None, op, pre, post, process_set))
        return (None, None, None, None, None, *reduced)


def grouped_allreduce(tensors: Tensors, average: bool | None = None, name: str | None = None,
                      compression: type[Compressor] = Compression.none, op: Any = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """:func:`allreduce` of every tensor of a list, as one op."""
    op = reduce_op(op, average)
    pairs = [compression.compress(t) for t in tensors]
    compressed = [t for t, _ in pairs]
    if _wants_grad(*compressed):
        results = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor,
                                          process_set, *compressed)
    else:
        results = synchronize(_grouped_allreduce_async(compressed, False, name, op,
                                                       prescale_factor, postscale_factor,
                                                       process_set))
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(results, pairs, strict=True)]


def grouped_allreduce_(tensors: Tensors, average: bool | None = None,
                       name: str | None = None, op: Any = None, prescale_factor: float = 1.0,
                       postscale_factor: float = 1.0,
                       process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """:func:`grouped_allreduce` written into ``tensors``."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def sparse_allreduce_async(tensor: torch.Tensor, name: str | None, op: Any,
                           process_set: ProcessSet = global_process_set) -> int:
    """Start combining a sparse COO tensor over the ranks by gathering every rank's
    indices and values (Sum, or Average: values divided by the number of ranks);
    :func:`synchronize` returns the (uncoalesced) sparse result."""
    where = target(process_set)
    sparse = tensor.coalesce()
    indices = stage(sparse.indices().t().contiguous(), "sparse allreduce")
    values = stage(sparse.values().contiguous(), "sparse allreduce")
    base = None if name is None else str(name)
    works = [where.allgather(indices.array, None if base is None else base + ".indices"),
             where.allgather(values.array, None if base is None else base + ".values")]
    members = len(process_set.ranks or []) if process_set is not None else 1
    divisor = members if op == Average else 1

    def finish(results: list[np.ndarray]) -> torch.Tensor:
        gathered_indices = torch.from_numpy(results[0]).t()
        gathered_values = to_tensor(results[1], sparse.values())
        if divisor > 1:
            gathered_values = gathered_values / divisor
        return torch.sparse_coo_tensor(gathered_indices.to(sparse.device), gathered_values,
                                       sparse.shape, check_invariants=False)

    return register(Combined(works), finish, (indices, values))


# -- allgather ---------------------------------------------------------------------------


def _allgather_async(tensor: torch.Tensor, name: str | None,
                     process_set: ProcessSet) -> int:
    staged = stage(tensor, "allgather")
    work = target(process_set).allgather(staged.array, name)
    return register(work, lambda result: to_tensor(result, tensor), staged)


def allgather_async(tensor: torch.Tensor, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start concatenating every rank's ``tensor`` along the first dimension (which may
    differ between ranks), in rank order."""
    return _allgather_async(tensor, name, process_set)


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None,
                process_set: ProcessSet) -> torch.Tensor:
        ctx.rows = tensor.shape[0]
        ctx.process_set = process_set
        return synchronize(_allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        # Horovod's convention: the gathered gradient is averaged over the ranks, then
        # each rank takes back the rows it contributed.
        reduced = synchronize(_allreduce_async(grad.contiguous(), False, None, Average, 1.0,
                                               1.0, ctx.process_set))
        rows = synchronize(_allgather_async(torch.tensor([ctx.rows], dtype=torch.int64), None,
                                            ctx.process_set))
        where = ctx.process_set or global_process_set
        me = where.rank() or 0
        start = int(rows[:me].sum())
        return reduced.narrow(0, start, ctx.rows), None, None


def allgather(tensor: torch.Tensor, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Every rank's ``tensor`` concatenated along the first dimension, in rank order."""
    if _wants_grad(tensor):
        return _Allgather.apply(tensor, name, process_set)
    return synchronize(_allgather_async(tensor, name, process_set))


def grouped_allgather_async(tensors: Tensors, name: str | None = None,
                            process_set: ProcessSet = global_process_set) -> int:
    """Start :func:`allgather` of every tensor of a list, as one op."""
    tensors = list(tensors)
    staged = [stage(t, "grouped_allgather") for t in tensors]
    work = target(process_set).grouped_allgather([s.array for s in staged], name)
    return register(work, lambda results: _as_tensors(results, tensors), staged)


def grouped_allgather(tensors: Tensors, name: str | None = None,
                      process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """:func:`allgather` of every tensor of a list, as one op."""
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# -- broadcast ---------------------------------------------------------------------------


def _broadcast_async(tensor: torch.Tensor, root_rank: int, inplace: bool, name: str | None,
                     process_set: ProcessSet) -> int:
    where = target(process_set)
    root = root_rank            # a rank of the job, also on a process set (Horovod's)
    staged = stage(tensor, "broadcast")
    if inplace:
        work = where.broadcast(staged.array, root, True, name)
        return register(work, lambda _: write_back(staged), staged)
    if staged.copied:
        work = where.broadcast(staged.array, root, True, name)
        return register(work, lambda _: to_tensor(staged.array, tensor), staged)
    work = where.broadcast(staged.array, root, False, name)
    return register(work, lambda result: to_tensor(result, tensor), staged)


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start copying ``root_rank``'s tensor to every rank, as a new tensor."""
    return _broadcast_async(tensor, root_rank, False, name, process_set)


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> int:
    """Start copying ``root_rank``'s tensor into ``tensor`` on every rank."""
    return _broadcast_async(tensor, root_rank, True, name, process_set)


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int, name: str | None,
                process_set: ProcessSet) -> torch.Tensor:
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(_broadcast_async(tensor, root_rank, False, name, process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        reduced = synchronize(_allreduce_async(grad.contiguous(), False, None, Average, 1.0,
                                               1.0, ctx.process_set))
        where = ctx.process_set or global_process_set
        if where.rank() != (where.ranks or [0]).index(ctx.root_rank):
            reduced = torch.zeros_like(reduced)
        return reduced, None, None, None


def broadcast(tensor: torch.Tensor, root_rank: int, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """``root_rank``'s tensor on every rank, as a new tensor."""
    if _wants_grad(tensor):
        return _Broadcast.apply(tensor, root_rank, name, process_set)
    return synchronize(_broadcast_async(tensor, root_rank, False, name, process_set))


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """``root_rank``'s tensor copied into ``tensor`` on every rank; returns ``tensor``."""
    return synchronize(_broadcast_async(tensor, root_rank, True, name, process_set))


# -- alltoall ----------------------------------------------------------------------------


def _splits_array(splits: Any) -> np.ndarray | None:
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        return splits.detach().cpu().numpy().astype(np.int64).reshape(-1)
    return np.asarray(splits, dtype=np.int64).reshape(-1)


def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: str | None = None,
                   process_set: ProcessSet = global_process_set) -> int:
    """Start sending rows ``splits[j]`` of ``tensor`` (consecutive, in rank order) to rank
    j (without splits: the first dimension divided evenly). :func:`synchronize` returns
    (the rows received from every rank in rank order, how many came from each)."""
    staged = stage(tensor, "alltoall")
    work = target(process_set).alltoall(staged.array, _splits_array(splits), name)

    def finish(result: tuple[np.ndarray, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        output, received = result
        return to_tensor(output, tensor), torch.from_numpy(np.asarray(received, np.int32))

    return register(work, finish, staged)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, splits: Any, name: str | None,
                process_set: ProcessSet) -> tuple[torch.Tensor, torch.Tensor]:
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.process_set = process_set
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *unused: Any) -> tuple[Any, ...]:
        back, _ = synchronize(alltoall_async(grad.contiguous(), ctx.received, None,
                                             ctx.process_set))
        return back, None, None, None


def alltoall(tensor: torch.Tensor, splits: Any = None, name: str | None = None,
             process_set: ProcessSet = global_process_set) -> Any:
    """The rows every rank sent to this one, in rank order; with ``splits`` also the
    number of rows received from each rank (Horovod returns both only then)."""
    if _wants_grad(tensor):
        output, received = _Alltoall.apply(tensor, splits, name, process_set)
    else:
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)


# -- reducescatter -----------------------------------------------------------------------


def reducescatter_async(tensor: torch.Tensor, name: str | None = None, op: Any = Average,
                        process_set: ProcessSet = global_process_set,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Start reducing ``tensor`` over the ranks, each keeping its share of the first
    dimension (split as evenly as possible, lower ranks taking one row more)."""
    staged = stage(tensor, "reducescatter")
    work = target(process_set).reducescatter(staged.array, op, prescale_factor,
                                             postscale_factor, name)
    return register(work, lambda result: to_tensor(result, tensor), staged)


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None, op: Any,
                process_set: ProcessSet, pre: float, post: float) -> torch.Tensor:
        ctx.args = (op, process_set, pre * post)
        return synchronize(reducescatter_async(tensor, name, op, process_set, pre, post))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        op, process_set, scale = ctx.args
        gathered = synchronize(_allgather_async(grad.contiguous(), None, process_set))
        if op == Average:
            scale /= len((process_set or global_process_set).ranks or [0])
        return gathered * scale, None, None, None, None, None


def reducescatter(tensor: torch.Tensor, name: str | None = None,
                  compression: type[Compressor] = Compression.none, op: Any = Average,
                  process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> torch.Tensor:
    """This rank's share of the reduction of ``tensor`` (see :func:`reducescatter_async`)."""
    compressed, ctx = compression.compress(tensor)
    if _wants_grad(compressed):
        result = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                      postscale_factor)
    else:
        result = synchronize(reducescatter_async(compressed, name, op, process_set,
                                                 prescale_factor, postscale_factor))
    return compression.decompress(result, ctx)


def grouped_reducescatter_async(tensors: Tensors, name: str | None = None, op: Any = Average,
                                process_set: ProcessSet = global_process_set,
                                prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> int:
    """Start :func:`reducescatter` of every tensor of a list, as one op."""
    tensors = list(tensors)
    staged = [stage(t, "grouped_reducescatter") for t in tensors]
    work = target(process_set).grouped_reducescatter([s.array for s in staged], op,
                                                     prescale_factor, postscale_factor, name)
    return register(work, lambda results: _as_tensors(results, tensors), staged)


def grouped_reducescatter(tensors: Tensors, name: str | None = None,
                          compression: type[Compressor] = Compression.none, op: Any = Average,
                          process_set: ProcessSet = global_process_set,
                          prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> list[torch.Tensor]:
    """:func:`reducescatter` of every tensor of a list, as one op."""
    pairs = [compression.compress(t) for t in tensors]
    results = synchronize(grouped_reducescatter_async([t for t, _ in pairs], name, op,
                                                      process_set, prescale_factor,
                                                      postscale_factor))
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(results, pairs, strict=True)]


# -- the rest ----------------------------------------------------------------------------


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Return once every rank (of ``process_set``) has called barrier."""
    target(process_set).barrier()


def join(device: int = -1) -> int:
    """This rank has run out of data: until every rank has joined, it takes part in the
    others' collectives with neutral data (zeros for sums, no rows for gathers), so they
    can finish their epochs. Returns the rank that joined last. ``device`` is accepted
    for Horovod's signature; the neutral data lives in host memory."""
    return int(runtime.join())
