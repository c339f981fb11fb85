"""Running a cycle's agreed ops, in the same order and the same batches on every rank.

Allreduces of one dtype, reduce op and scaling are fused (:mod:`gcurun.runtime.engine.fusion`);
every other op runs alone with the runtime's algorithms. A rank that has called
``join()`` takes part in the reductions it never submitted, with neutral data: the
identity of the reduction (gathers and broadcasts fail while a rank has joined, see
:func:`gcurun.runtime.engine.requests.agree`).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from gcurun.runtime import algorithms as alg
from gcurun.runtime.algorithms import HostLayout, Part, Pieces, Reducer, TwoLevelMode
from gcurun.runtime.api import ReduceOp, Transport
from gcurun.runtime.dtypes import Combine, aligned_empty, combine, scale, scale_into
from gcurun.runtime.engine import fusion
from gcurun.runtime.engine._results import deliver as shape_result
from gcurun.runtime.engine._results import finish_reduction
from gcurun.runtime.engine.pages import HugePages
from gcurun.runtime.engine.requests import Agreed, Op, OpKind
from gcurun.runtime.engine.timeline import Timeline

Item = tuple[Agreed, Op | None]       # what runs, and this rank's op (None: joined)
Complete = Callable[[Op, Any], None]
PLANS = 64                            # cycles' plans kept (each a list of agreed ops)

ACTIVITY = {
    OpKind.ALLGATHER: "RING_ALLGATHER",
    OpKind.BROADCAST: "BROADCAST_TREE_OR_CHAIN",
    OpKind.ALLTOALL: "PAIRWISE_ALLTOALL",
    OpKind.REDUCESCATTER: "RING_REDUCESCATTER",
}


def identity(rop: ReduceOp, dtype: np.dtype) -> Any:
    """The element that leaves a reduction unchanged (a joined rank's contribution)."""
    if rop in (ReduceOp.SUM, ReduceOp.AVERAGE):
        return 0
    if rop == ReduceOp.PRODUCT:
        return 1
    low = rop == ReduceOp.MAX
    if dtype.kind == "b":
        return not low
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if low else info.max
    return -np.inf if low else np.inf


class Layout(NamedTuple):
    """Where each member of a fused allreduce batch lies: ``offsets[i]`` in the fusion
    buffer, or -1 for a member reduced where it lies; ``packed`` elements are copied."""

    counts: list[int]
    offsets: list[int]
    packed: int


def layout(dtype: np.dtype, counts: list[int], limit: int) -> Layout:
    """The layout of a batch of members of ``counts`` elements: those under ``limit``
    bytes are packed into the fusion buffer, in order."""
    offsets, packed = [], 0
    for count in counts:
        if count * dtype.itemsize < limit:
            offsets.append(packed)
            packed += count
        else:
            offsets.append(-1)
    return Layout(counts, offsets, packed)


def deliver(op: Op, result: np.ndarray) -> Any:
    """``op``'s result shaped like its array. An in-place op on a C-contiguous array was
    reduced in that array's own memory (its flat view), so there is nothing to copy."""
    if op.inplace and result is op.src and op.arr.flags.c_contiguous:
        return op.arr
    return shape_result(op.arr, result, op.inplace)


class Executor:
    """Runs agreed ops over one transport; owns the reusable buffers."""

    def __init__(self, transport: Transport, chunk_bytes: int, threshold_bytes: int,
                 timeline: Timeline | None = None, huge_pages: bool = True,
                 layout: HostLayout | None = None, two_levels: TwoLevelMode = "auto"):
        self.t = transport
        self.rank, self.size = transport.rank, transport.size
        self.chunk_bytes = chunk_bytes
        self.threshold_bytes = threshold_bytes
        self.timeline = timeline
        self.fusion = fusion.FusionBuffers()
        # Peers on this host read the tensors not copied into the fusion buffer where
        # they lie: give the memory under them huge pages. A rank alone on its host has
        # no such reader (its bytes go through sockets), and the kernel's collapse would
        # copy each new gradient for nothing (ResNet-18 at half width on 2 hosts: about
        # 10 ms of the engine's CPU a step).
        alone = layout is not None and len(layout.local_ranks(self.rank)) == 1
        self.pages = HugePages(huge_pages and transport.size > 1 and not alone)
        self.reducer = Reducer(transport, chunk_bytes, layout, two_levels)
        self.scratch = self.reducer.scratch
        # batches run, and ops that ran in a batch of more than one
        self.stats = {"batches": 0, "fused": 0}
        self._plans: OrderedDict[tuple[Agreed, ...],
                                 list[tuple[list[int], Layout | None]]] = OrderedDict()

    def retune(self, threshold_bytes: int, chunk_bytes: int, stream_bytes: int,
               two_levels: TwoLevelMode) -> None:
        """New knobs (autotune's), taken by every rank between the same two cycles."""
        reducer = self.reducer
        if chunk_bytes != self.chunk_bytes:
            reducer.release()       # (its prepared exchanges receive into old chunks)
            reducer.scratch.resize(chunk_bytes)
            self.chunk_bytes = chunk_bytes
        reducer.stream_bytes = stream_bytes
        reducer.mode = two_levels
        self.threshold_bytes = threshold_bytes
        self._plans.clear()

    def run(self, items: Sequence[Item], ready_ns: int, complete: Complete) -> None:
        """Run ``items`` (fusing what may be fused); ``complete(op, result)`` for each of
        this rank's ops as soon as its batch is done."""
        for batch, layout in self._plan([agreed for agreed, _ in items]):
            members = [items[i] for i in batch]
            self.stats["batches"] += 1
            self.stats["fused"] += len(members) if len(members) > 1 else 0
            start = time.monotonic_ns()
            self._queued(members, ready_ns, start)
            if members[0][0].kind == OpKind.ALLREDUCE:
                self._allreduce(members, layout, complete)
            else:
                self._single(members[0], complete, start)

    def _plan(self, agreed: list[Agreed]) -> list[tuple[list[int], Layout | None]]:
        """The batches of a cycle's agreed ops and each fused batch's layout. Training
        agrees the same ops step after step, so a plan is kept for when they come again."""
        key = tuple(agreed)
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        keys: list[tuple[fusion.BatchKey | None, int]] = []
        counts = [a.elements for a in agreed]
        for a, count in zip(agreed, counts, strict=True) if len(agreed) > 1 else ():
            if a.kind == OpKind.ALLREDUCE:
                keys.append((fusion.BatchKey(a.code, a.rop, a.prescale, a.postscale),
                             count * a.dtype.itemsize))
            else:
                keys.append((None, 0))
        batches = fusion.plan_batches(keys, self.threshold_bytes) if len(agreed) > 1 else \
            [[0]] if agreed else []
        limit = fusion.copy_limit(self.chunk_bytes, self.t.pieces_in_one_message)
        plan = [(batch, layout(agreed[batch[0]].dtype, [counts[i] for i in batch], limit)
                 if len(batch) > 1 else None) for batch in batches]
        self._plans[key] = plan
        if len(self._plans) > PLANS:
            self._plans.popitem(last=False)
        return plan

    # -- allreduce ------------------------------------------------------------------------

    def _allreduce(self, members: list[Item], layout: Layout | None,
                   complete: Complete) -> None:
        first = members[0][0]
        dtype, rop = first.dtype, ReduceOp(first.rop)
        results: list[np.ndarray | None] = [None] * len(members)    # each op's output
        pairs: list[Part] = []
        copies: list[int] = []      # members copied in (and out of) the fusion buffer
        buf = None
        if layout is None:
            pairs.append(self._io(members[0]))
            results[0] = pairs[0][1]
        else:
            began = time.monotonic_ns()
            buf = self.fusion.get(dtype, layout.packed)
            for index, offset in enumerate(layout.offsets):
                item = members[index]
                if offset < 0:
                    pairs.append(self._io(item))
                    results[index] = pairs[-1][1]
                    continue
                op = item[1]
                region = buf[offset:offset + layout.counts[index]]
                if op is None:
                    region.fill(identity(rop, dtype))
                else:
                    region[...] = op.src
                    copies.append(index)
            if layout.packed:
                scale(buf, first.prescale)
                pairs.insert(0, (buf, buf))
            if self.timeline is not None:
                self._span([members[i] for i in copies], "MEMCPY_IN_FUSION_BUFFER",
                           began, time.monotonic_ns())
        self._reduce(members, Pieces(pairs), rop, first.postscale)
        if copies:
            assert buf is not None and layout is not None
            began = time.monotonic_ns()
            for index in copies:
                op = members[index][1]
                assert op is not None
                offset, count = layout.offsets[index], layout.counts[index]
                out = op.src if op.inplace else aligned_empty(count, dtype)
                out[...] = buf[offset:offset + count]
                results[index] = out
            if self.timeline is not None:
                self._span([members[i] for i in copies], "MEMCPY_OUT_FUSION_BUFFER",
                           began, time.monotonic_ns())
        for (_, op), result in zip(members, results, strict=True):
            if op is not None and result is not None:
                complete(op, deliver(op, result))

    def _reduce(self, members: list[Item], pieces: Pieces, rop: ReduceOp,
                postscale: float) -> None:
        """The reduction routine over the batch; then the average or post-scaling."""
        marks: dict[str, int] = {}

        def phase(name: str, started: bool) -> None:
            if started:
                marks[name] = time.monotonic_ns()
            else:
                self._span(members, name, marks[name], time.monotonic_ns())

        self.reducer.allreduce(pieces, combine(rop, members[0][0].dtype),
                               finisher(rop, self.size, postscale),
                               phase if self.timeline is not None else None)

    def allreduce_now(self, tensor: np.ndarray, inplace: bool, ufunc: Combine,
                      finish: alg.Finish | None) -> np.ndarray:
        """A single agreed allreduce of this rank's contiguous ``tensor`` (no prescaling),
        outside a cycle's batches: the engine's quick cycle. In place, the tensor may be
        held (its ring's exchanges kept prepared) while it comes again and again."""
        src = tensor if tensor.ndim == 1 else tensor.reshape(-1)
        reducer = self.reducer
        if inplace:
            if tensor is not reducer.held:
                self.pages.prepare(src)
            reducer.allreduce(Pieces([(src, src)]), ufunc, finish, None, tensor)
            return tensor
        self.pages.prepare(src)
        out = aligned_empty(len(src), tensor.dtype)
        reducer.allreduce(Pieces([(src, out)]), ufunc, finish)
        return out.reshape(tensor.shape)

    def _io(self, item: Item) -> Part:
        """Input and output of one allreduce reduced where it lies (prescaled)."""
        agreed, op = item
        dtype, rop = agreed.dtype, ReduceOp(agreed.rop)
        if op is None:
            data = np.full(agreed.elements, identity(rop, dtype), dtype)
            return data, data
        src = op.src
        self.pages.prepare(src)
        out = src if op.inplace else aligned_empty(len(src), dtype)
        if agreed.prescale != 1.0:
            scale_into(src, agreed.prescale, out)
            src = out
        return src, out

    # -- everything else ------------------------------------------------------------------

    def _single(self, item: Item, complete: Complete, began: int) -> None:
        agreed, op = item
        kind = OpKind(agreed.kind)
        if kind == OpKind.BARRIER:
            result: Any = None
        elif kind == OpKind.ALLGATHER:
            result = self._allgather(agreed, op)
        elif kind == OpKind.BROADCAST:
            result = self._broadcast(agreed, op)
        elif kind == OpKind.ALLTOALL:
            result = self._alltoall(agreed, op)
        elif kind == OpKind.REDUCESCATTER:
            result = self._reducescatter(agreed, op)
        else:
            raise ValueError(f"the engine cannot run {kind.label} ops")
        if kind in ACTIVITY:
            self._span([item], ACTIVITY[kind], began, time.monotonic_ns())
        if op is not None:
            complete(op, result)

    def _allgather(self, agreed: Agreed, op: Op | None) -> np.ndarray:
        assert agreed.rows is not None
        dtype, row = agreed.dtype, math.prod(agreed.shape)
        out = np.empty((sum(agreed.rows),) + agreed.shape, dtype)
        flat = out.reshape(-1)
        segments = alg.to_segments([n * row for n in agreed.rows])
        offset, length = segments[self.rank]
        if op is not None:
            flat[offset:offset + length] = op.src
        alg.allgather(self.t, flat, segments)
        return out

    def _broadcast(self, agreed: Agreed, op: Op | None) -> np.ndarray | None:
        if op is None:
            flat = np.empty(agreed.elements, agreed.dtype)
        elif op.inplace:
            flat = op.src
        elif self.rank == agreed.root:
            flat = op.src.copy()
        else:
            flat = np.empty(len(op.src), agreed.dtype)
        alg.broadcast(self.t, flat, agreed.root, self.scratch.chunk_len(agreed.dtype))
        return None if op is None else shape_result(op.arr, flat, op.inplace)

    def _alltoall(self, agreed: Agreed, op: Op | None) -> tuple[np.ndarray, np.ndarray]:
        assert agreed.splits is not None
        p, r = self.size, self.rank
        dtype, row = agreed.dtype, math.prod(agreed.shape)
        send_rows = agreed.splits[r]
        recv_rows = [agreed.splits[j][r] for j in range(p)]
        src = op.src if op is not None else np.empty(0, dtype)
        out = np.empty((sum(recv_rows),) + agreed.shape, dtype)
        alg.pairwise_alltoall(self.t, src, alg.to_segments([n * row for n in send_rows]),
                              out.reshape(-1), alg.to_segments([n * row for n in recv_rows]))
        return out, np.array(recv_rows, np.int64)

    def _reducescatter(self, agreed: Agreed, op: Op | None) -> np.ndarray:
        dtype, rop = agreed.dtype, ReduceOp(agreed.rop)
        shape = agreed.shape
        if op is None:
            src = np.full(agreed.elements, identity(rop, dtype), dtype)
        else:
            src = op.src
            if agreed.prescale != 1.0:
                src = src.copy()
                scale(src, agreed.prescale)
        rows = alg.even_counts(shape[0] if shape else 0, self.size)
        row = math.prod(shape[1:])
        counts = [n * row for n in rows]
        out = np.empty((rows[self.rank],) + shape[1:], dtype)
        alg.reduce_scatter(self.t, src, counts, out.reshape(-1), combine(rop, dtype),
                           self.scratch.chunk(dtype), np.empty(max(counts), dtype))
        finish_reduction(out, rop, self.size, agreed.postscale)
        return out

    # -- plumbing -------------------------------------------------------------------------

    def _queued(self, members: list[Item], ready_ns: int, start_ns: int) -> None:
        self._span(members, "QUEUE", ready_ns, start_ns)

    def _span(self, members: Sequence[Item], activity: str, start_ns: int,
              end_ns: int) -> None:
        if self.timeline is not None:
            for agreed, _ in members:
                self.timeline.activity(agreed.name, activity, start_ns, end_ns)


def finisher(rop: ReduceOp, size: int, postscale: float) -> alg.Finish | None:
    """What completes a reduction in place (the average, post-scaling), or None."""
    if rop != ReduceOp.AVERAGE and postscale == 1.0:
        return None

    def finish(out: np.ndarray) -> None:
        finish_reduction(out, rop, size, postscale)

    return finish
