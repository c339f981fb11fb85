"""The collectives of one initialized runtime: arguments checked, ranks negotiated, data
moved by :mod:`gcurun.runtime.algorithms` over the backend's transport."""

from __future__ import annotations

import math
import pickle
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gcurun.errors import CollectiveError
from gcurun.runtime import algorithms as alg
from gcurun.runtime.api import CollectiveTimeout, PeerFailureError, ReduceOp, Transport
from gcurun.runtime.arguments import (
    dtype_error,
    reduce_error,
    reduce_op,
    rows_error,
    send_counts,
)
from gcurun.runtime.dtypes import (
    UFUNCS,
    aligned_empty,
    as_array,
    average,
    flat_contiguous,
    scale,
)
from gcurun.runtime.negotiate import (
    BLOCK,
    HEADER,
    INLINE,
    INLINE_CAPACITY,
    Negotiator,
    OpKind,
    Request,
    prepared_sendrecv,
    release_sendrecv,
    title,
)

# _last_inplace when the last large in-place call of two ranks ran on held exchanges.
NO_CALL: tuple[Callable[[], Any], Any] = (lambda: None, None)

# Up to this size an allreduce gathers every rank's tensor and reduces locally: ceil(log2 p)
# exchanges instead of the ring's 2(p-1), which matters more than bandwidth when small.
GATHER_REDUCE_BYTES = 64 << 10


class Scratch:
    """The reusable receive buffers of one communicator (or engine): a ring chunk per
    dtype, on huge pages, and, made on first use, room to gather every rank's small
    tensor (:func:`gcurun.runtime.algorithms.gather_allreduce`)."""

    def __init__(self, chunk_bytes: int, size: int):
        self.chunk_bytes = chunk_bytes
        self.size = size
        self._chunks: dict[np.dtype, np.ndarray] = {}
        self._gather: np.ndarray | None = None

    def chunk_len(self, dtype: np.dtype) -> int:
        """Elements of ``dtype`` in one ring chunk."""
        return max(1, self.chunk_bytes // max(dtype.itemsize, 1))

    def chunk(self, dtype: np.dtype) -> np.ndarray:
        """A receive buffer of one chunk of ``dtype``."""
        chunk = self._chunks.get(dtype)
        if chunk is None:
            chunk = self._chunks[dtype] = aligned_empty(self.chunk_len(dtype), dtype)
        return chunk

    def gather(self) -> np.ndarray:
        """Room for gather_allreduce of up to GATHER_REDUCE_BYTES."""
        if self._gather is None:
            self._gather = np.empty(2 * self.size * GATHER_REDUCE_BYTES, np.uint8)
        return self._gather


class _Guard:
    __slots__ = ("comm", "request")

    def __init__(self, comm: Communicator, request: Request):
        self.comm = comm
        self.request = request

    def __enter__(self) -> None:
        comm = self.comm
        comm._lock.acquire()
        if comm._failure is not None:
            comm._lock.release()
            raise comm._refuse(self.request)

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: Any) -> None:
        self.comm._lock.release()
        if kind is PeerFailureError or kind is CollectiveTimeout:
            raise self.comm._failed(exc, self.request) from None  # type: ignore[arg-type]


class _Prepared:
    """A prepared allreduce of one signature (dtype, shape, op, name, postscale): what
    the general path works out on every call, worked out once."""

    __slots__ = ("request", "invariant", "expected", "views", "ufunc", "postscale", "finish",
                 "peer_header", "ring", "plain", "inline")

    def __init__(self, request: Request, invariant: bytes, views: list[np.ndarray],
                 ufunc: np.ufunc, postscale: float, ring: bool):
        self.request = request
        self.invariant = invariant
        self.views = views          # every rank's inline data in the gathered blocks, or []
        self.ring = ring            # large: the ring; else gathered and reduced locally
        self.ufunc = ufunc
        self.postscale = postscale
        self.finish = request.op == ReduceOp.AVERAGE or postscale != 1.0
        # Two ranks, a result of at least one dimension: one ufunc call makes it.
        self.plain = len(views) == 2 and len(request.shape) > 0
        # Where the one peer's header lands, and what it must hold, as 8-byte words
        # (they compare faster than bytes).
        self.peer_header: memoryview | None = None
        self.expected = memoryview(invariant).cast("Q")
        self.inline: Callable[..., np.ndarray] | None = None   # see _pair_allreduce


class Communicator:
    """Horovod's collectives on numpy arrays (or any buffer) over one transport.

    Calls from several threads are serialized. After a peer failure or a timeout the
    communicator refuses further calls: call ``shutdown()`` and ``init()`` again.
    """

    def __init__(self, transport: Transport, chunk_bytes: int):
        self.transport = transport
        self.rank = transport.rank
        self.size = transport.size
        self.chunk_bytes = chunk_bytes
        self.negotiator = Negotiator(transport, chunk_bytes)
        self.scratch = Scratch(chunk_bytes, self.size)
        self._lock = threading.Lock()
        self._failure: str | None = None
        self._prepared: dict[tuple, _Prepared] = {}
        # By name, the allreduce of the name's last signature, where two ranks have a
        # quick one (_pair_allreduce).
        self._inline: dict[str | None, Callable[..., np.ndarray]] = {}
        self._general = self._allreduce        # bound once: every quick call may need it
        # (tensor, plan, exchange there, exchange back): the one tensor whose 2-rank ring
        # runs on prepared exchanges (_pair_allreduce), or Nones; and (weak reference to
        # the tensor, plan) of the last large in-place call that ran without them.
        self._held: tuple[Any, Any, Any, Any] = (None, None, None, None)
        self._last_inplace: tuple[Callable[[], Any], Any] = NO_CALL

    # -- reductions ---------------------------------------------------------------------

    def allreduce(self, tensor: Any, op: ReduceOp = ReduceOp.AVERAGE,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                  name: str | None = None, inplace: bool = False) -> np.ndarray:
        """The reduction of ``tensor`` over all ranks, same shape and dtype."""
        # One line: it is part of the latency of tiny allreduces.
        return self._inline.get(name, self._general)(tensor, op, prescale_factor,
                                                     postscale_factor, name, inplace)

    def _allreduce(self, tensor: Any, op: ReduceOp, prescale_factor: float,
                   postscale_factor: float, name: str | None, inplace: bool) -> np.ndarray:
        """allreduce, the general way."""
        if type(tensor) is np.ndarray and prescale_factor == 1.0:
            plan = self._prepared.get((tensor.dtype, tensor.shape, op, name, postscale_factor))
            if plan is None:
                plan = self._prepare(tensor, op, name, postscale_factor)
            elif plan.inline is not None:       # the name's latest signature takes over
                self._inline[name] = plan.inline
            if plan is not None and tensor.flags.c_contiguous and (
                    not inplace or tensor.flags.writeable):
                return self._prepared_allreduce(plan, tensor, inplace)
        arr = as_array(tensor)
        op, error = reduce_op(op)
        error = error or reduce_error(arr, op, prescale_factor, postscale_factor)
        request = Request(OpKind.ALLREDUCE, name, arr.dtype, arr.shape, op, error=error)
        src = flat_contiguous(arr)
        out = src if inplace else aligned_empty(len(src), arr.dtype)
        if prescale_factor != 1.0 and error is None:
            if out is not src:
                out[...] = src
            scale(out, prescale_factor)
            src = out
        inline = src if src.nbytes <= INLINE_CAPACITY and error is None else None
        with self._call(request):
            agreement = self.negotiator.negotiate(request, inline)
            ufunc = UFUNCS[op]
            if agreement.all_inline:
                blocks = [agreement.inline(i, arr.dtype, len(src)) for i in range(self.size)]
                alg.reduce_blocks(ufunc, blocks, out)
            elif src.nbytes <= GATHER_REDUCE_BYTES:
                alg.gather_allreduce(self.transport, src, out, ufunc, self.scratch.gather())
            else:
                alg.ring_allreduce(self.transport, src, out, ufunc, self.scratch.chunk(arr.dtype))
        _finish_reduction(out, op, self.size, postscale_factor)
        return _deliver(arr, out, inplace)

    def reducescatter(self, tensor: Any, op: ReduceOp = ReduceOp.AVERAGE,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      name: str | None = None) -> np.ndarray:
        """Rank r's rows of the reduction: the first dimension split as evenly as
        possible, the lower ranks taking one row more."""
        arr = as_array(tensor)
        op, error = reduce_op(op)
        error = error or reduce_error(arr, op, prescale_factor, postscale_factor) \
            or rows_error(arr)
        request = Request(OpKind.REDUCESCATTER, name, arr.dtype, arr.shape, op, error=error)
        src = flat_contiguous(arr)
        if prescale_factor != 1.0 and error is None:
            src = src.copy()
            scale(src, prescale_factor)
        rows = alg.even_counts(arr.shape[0] if arr.ndim else 0, self.size)
        row = math.prod(arr.shape[1:])
        counts = [n * row for n in rows]
        out = np.empty((rows[self.rank],) + arr.shape[1:], arr.dtype)
        with self._call(request):
            self.negotiator.negotiate(request)
            scratch = np.empty(max(counts), arr.dtype)
            alg.reduce_scatter(self.transport, src, counts, out.reshape(-1), UFUNCS[op],
                               self.scratch.chunk(arr.dtype), scratch)
        _finish_reduction(out, op, self.size, postscale_factor)
        return out

    def _prepare(self, tensor: np.ndarray, op: Any, name: str | None,
                   postscale: float) -> _Prepared | None:
        """How to allreduce tensors like ``tensor`` without the general path's
        preparations, or None when the general path must handle (and report) the call."""
        rop, error = reduce_op(op)
        if error or reduce_error(tensor, rop, 1.0, postscale):
            return None
        request = Request(OpKind.ALLREDUCE, name, tensor.dtype, tensor.shape, rop)
        invariant = self.negotiator.invariant(request)
        views = []
        if tensor.nbytes <= INLINE_CAPACITY:
            for rank in range(self.size):
                start = rank * BLOCK + HEADER.size
                region = self.negotiator.gathered[start:start + tensor.nbytes]
                views.append(region.view(tensor.dtype).reshape(tensor.shape))
        plan = _Prepared(request, invariant, views, UFUNCS[rop], postscale,
                         ring=tensor.nbytes > GATHER_REDUCE_BYTES)
        if self.size == 2:
            start = (1 - self.rank) * BLOCK
            plan.peer_header = self.negotiator.gathered.data[start:start + len(invariant)
                                                             ].cast("Q")
        if len(self._prepared) > 1024:
            self._prepared.clear()
            self._inline.clear()
            with self._lock:
                self._release_held()
        self._prepared[(tensor.dtype, tensor.shape, op, name, postscale)] = plan
        # Two ranks: the ring when each half fits in one chunk (as in alg.ring_allreduce).
        quick = plan.plain or (
            plan.ring and tensor.size <= 2 * self.scratch.chunk_len(tensor.dtype))
        if quick and plan.peer_header is not None:
            plan.inline = self._inline[name] = self._pair_allreduce(plan, tensor.dtype, op)
        return plan

    def _pair_allreduce(self, plan: _Prepared, dtype: np.dtype,
                        op: Any) -> Callable[..., np.ndarray]:
        """The latency of a tiny allreduce between two ranks, and the overhead of a large
        one: a function of allreduce's arguments that runs ``plan`` for a call of its
        signature and takes the general way for any other. Its state lives in closure
        cells: no lookups, no argument parsing, no new objects but views and the result.
        A tiny tensor rides in the header block, so the exchange completes the call; a
        large one then makes the ring of two: halves swapped, reduced, swapped back (the
        messages of :func:`gcurun.runtime.algorithms.ring_allreduce`)."""
        general, ndarray = self._general, np.ndarray
        lock, negotiator, exchange = self._lock, self.negotiator, self.negotiator.exchange
        request, invariant, expected = plan.request, plan.invariant, plan.expected
        peer_header = plan.peer_header
        shape, postscale, ufunc, finish = request.shape, plan.postscale, plan.ufunc, plan.finish
        ring = plan.ring
        # numpy deprecates a positional out for minimum and maximum.
        positional = ufunc not in (np.minimum, np.maximum)
        if ring:
            sendrecv, peer = self.transport.sendrecv, 1 - self.rank
            count = math.prod(shape)
            mine, theirs, mine_len = alg.pair_halves(count, self.rank)
            incoming = self.scratch.chunk(dtype)[:mine_len]
            flat = len(shape) == 1

            def hold(tensor: np.ndarray, src: np.ndarray) -> None:
                """At the communicator's second large in-place call in a row with one
                tensor and signature on this quick ring (a signature's first call goes
                the general way), make its two exchanges the transport's prepared
                ones (MPI persistent requests), in place of any other tensor's (they keep
                their buffers alive). Tensors taking turns are never held, nor take the
                held one's place."""
                last_tensor, last_plan = self._last_inplace
                if last_plan is not plan or last_tensor() is not tensor:
                    self._last_inplace = (weakref.ref(tensor), plan)
                    return
                self._release_held()
                made = []
                try:        # an optimization: a transport that cannot prepare is not one
                    for send, recv in ((src[theirs], incoming), (src[mine], src[theirs])):
                        made.append(prepared_sendrecv(self.transport, send, peer, recv, peer))
                except Exception:  # noqa: BLE001 - the general way goes on working
                    for run in made:
                        release_sendrecv(self.transport, run)
                    return
                self._held = (tensor, plan, made[0], made[1])
        else:
            first, second = plan.views
            block = plan.views[self.rank]

        def run(tensor: Any, op_: Any, prescale_: float, postscale_: float,
                name: str | None, inplace: bool) -> np.ndarray:
            if type(tensor) is not ndarray or tensor.shape != shape \
                    or tensor.dtype is not dtype or op_ is not op or prescale_ != 1.0 \
                    or postscale_ != postscale or ring and not (
                        tensor.flags.c_contiguous and (tensor.flags.writeable or not inplace)):
                return general(tensor, op_, prescale_, postscale_, name, inplace)
            lock.acquire()      # (a with statement costs more here)
            try:
                if self._failure is not None:
                    raise self._refuse(request)
                if negotiator.header_owner is not plan:
                    negotiator.write_header(invariant, 0, 0 if ring else INLINE)
                    negotiator.header_owner = plan
                if not ring:
                    block[...] = tensor
                try:
                    exchange()
                    if peer_header != expected:
                        negotiator.header_owner = None
                        negotiator.raise_disagreement(request)
                    if ring:
                        src = tensor if flat else tensor.reshape(-1)
                        out = src if inplace else aligned_empty(count, dtype)
                        held = self._held
                        on_held = inplace and held[0] is tensor and held[1] is plan
                        if on_held:
                            self._last_inplace = NO_CALL    # (another tensor's row ends)
                            held[2]()       # the far half out, the peer's near half in
                        else:
                            sendrecv(src[theirs], peer, incoming, peer)
                        if positional:
                            ufunc(src[mine], incoming, out[mine])
                        else:
                            ufunc(src[mine], incoming, out=out[mine])
                        if on_held:
                            held[3]()       # the near half out, the far half in
                        else:
                            sendrecv(out[mine], peer, out[theirs], peer)
                            if inplace:
                                hold(tensor, src)
                except (PeerFailureError, CollectiveTimeout) as exc:
                    raise self._failed(exc, request) from None
                if ring:
                    out = tensor if inplace else out.reshape(shape)
                elif not inplace:
                    out = ufunc(first, second)
                elif positional:        # (out as a keyword costs more)
                    out = ufunc(first, second, tensor)
                else:
                    out = ufunc(first, second, out=tensor)
            finally:
                lock.release()
            if finish:
                _finish_reduction(out, request.op, 2, postscale)  # type: ignore[arg-type]
            return out

        return run

    def _release_held(self) -> None:
        """Free the prepared exchanges of the held tensor, if any (under the lock)."""
        for run in self._held[2:]:
            if run is not None:
                release_sendrecv(self.transport, run)
        self._held = (None, None, None, None)

    def _prepared_allreduce(self, plan: _Prepared, tensor: np.ndarray,
                            inplace: bool) -> np.ndarray:
        """The general path written out flat (it is the latency of small allreduces and
        the overhead of large ones), sending the very same messages. A tensor that fits
        in the negotiation block rides in it, so one exchange completes the call."""
        negotiator = self.negotiator
        views = plan.views
        lock = self._lock
        lock.acquire()
        try:
            if self._failure is not None:
                raise self._refuse(plan.request)
            if negotiator.header_owner is not plan:
                negotiator.write_header(plan.invariant, 0, INLINE if views else 0)
                negotiator.header_owner = plan
            if views:
                views[self.rank][...] = tensor
            try:
                negotiator.exchange()
                peer_header = plan.peer_header
                if not (peer_header == plan.expected if peer_header is not None
                        else negotiator.agreed(plan.invariant)):
                    negotiator.header_owner = None
                    negotiator.raise_disagreement(plan.request)
                if plan.ring:
                    out = tensor if inplace else aligned_empty(tensor.size, tensor.dtype
                                                               ).reshape(tensor.shape)
                    alg.ring_allreduce(self.transport, tensor.reshape(-1), out.reshape(-1),
                                       plan.ufunc, self.scratch.chunk(tensor.dtype))
                elif not views:
                    out = tensor if inplace else np.empty_like(tensor)
                    alg.gather_allreduce(self.transport, tensor.reshape(-1), out.reshape(-1),
                                         plan.ufunc, self.scratch.gather())
            except (PeerFailureError, CollectiveTimeout) as exc:
                raise self._failed(exc, plan.request) from None
            if views:
                out = reduce_views(plan, tensor, inplace)
        finally:
            lock.release()
        if plan.finish:
            _finish_reduction(out, plan.request.op, self.size,  # type: ignore[arg-type]
                              plan.postscale)
        return out

    # -- data movement ------------------------------------------------------------------

    def allgather(self, tensor: Any, name: str | None = None) -> np.ndarray:
        """Every rank's tensor concatenated along the first dimension (which may differ
        between ranks)."""
        arr = as_array(tensor)
        error = dtype_error(arr) or rows_error(arr)
        rows = arr.shape[0] if arr.ndim else 0
        request = Request(OpKind.ALLGATHER, name, arr.dtype, arr.shape, varying=rows,
                          error=error)
        src = flat_contiguous(arr)
        inline = src if src.nbytes <= INLINE_CAPACITY and error is None else None
        with self._call(request):
            agreement = self.negotiator.negotiate(request, inline)
            all_rows = [agreement.varying(i) for i in range(self.size)]
            row = math.prod(arr.shape[1:])
            out = np.empty((sum(all_rows),) + arr.shape[1:], arr.dtype)
            flat = out.reshape(-1)
            segments = alg.to_segments([n * row for n in all_rows])
            if agreement.all_inline:
                for i, (offset, length) in enumerate(segments):
                    flat[offset:offset + length] = agreement.inline(i, arr.dtype, length)
            else:
                offset, length = segments[self.rank]
                flat[offset:offset + length] = src
                alg.ring_allgather(self.transport, flat, segments)
        return out

    def broadcast(self, tensor: Any, root_rank: int, name: str | None = None,
                  inplace: bool = False) -> np.ndarray:
        """``root_rank``'s tensor on every rank."""
        arr = as_array(tensor)
        error = dtype_error(arr) or self._root_error(root_rank)
        request = Request(OpKind.BROADCAST, name, arr.dtype, arr.shape, root=root_rank,
                          error=error)
        is_root = self.rank == root_rank
        if inplace:
            flat = flat_contiguous(arr)
        else:
            flat = np.array(arr, copy=True).reshape(-1) if is_root else np.empty(arr.size,
                                                                                 arr.dtype)
        inline = flat if is_root and flat.nbytes <= INLINE_CAPACITY and error is None else None
        with self._call(request):
            agreement = self.negotiator.negotiate(request, inline)
            if agreement.all_inline:
                if not is_root:
                    flat[...] = agreement.inline(root_rank, arr.dtype, len(flat))
            else:
                alg.broadcast(self.transport, flat, root_rank, self.scratch.chunk_len(arr.dtype))
        return _deliver(arr, flat, inplace)

    def alltoall(self, tensor: Any, splits: Sequence[int] | np.ndarray | None = None,
                 name: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Send rows ``splits[j]`` of ``tensor`` (in order) to rank j; return the rows
        received from every rank concatenated in rank order, and how many came from each."""
        arr = as_array(tensor)
        send_rows, error = send_counts(arr, splits, self.size)
        error = dtype_error(arr) or rows_error(arr) or error
        request = Request(OpKind.ALLTOALL, name, arr.dtype, arr.shape,
                          varying=arr.shape[0] if arr.ndim else 0, error=error)
        p, r = self.size, self.rank
        inline = send_rows if send_rows.nbytes <= INLINE_CAPACITY and error is None else None
        with self._call(request):
            agreement = self.negotiator.negotiate(request, inline)
            if agreement.all_inline:
                recv_rows = np.array([agreement.inline(j, send_rows.dtype, p)[r]
                                      for j in range(p)], np.int64)
            else:
                recv_rows = np.empty(p, np.int64)
                ones = alg.to_segments([1] * p)
                alg.pairwise_alltoall(self.transport, send_rows, ones, recv_rows, ones)
            row = math.prod(arr.shape[1:])
            out = np.empty((int(recv_rows.sum()),) + arr.shape[1:], arr.dtype)
            alg.pairwise_alltoall(self.transport, flat_contiguous(arr),
                                  alg.to_segments([int(n) * row for n in send_rows]),
                                  out.reshape(-1),
                                  alg.to_segments([int(n) * row for n in recv_rows]))
        return out, recv_rows

    def barrier(self) -> None:
        """Return once every rank has called barrier."""
        request = Request(OpKind.BARRIER, None)
        with self._call(request):
            self.negotiator.negotiate(request)

    # -- Python objects (pickled; never used for tensors) ---------------------------------

    def broadcast_object(self, obj: Any, root_rank: int = 0, name: str | None = None) -> Any:
        is_root = self.rank == root_rank
        payload = pickle.dumps(obj) if is_root else b""
        request = Request(OpKind.BROADCAST_OBJECT, name, root=root_rank, varying=len(payload),
                          error=self._root_error(root_rank))
        data = np.frombuffer(payload, np.uint8)
        inline = data if is_root and len(payload) <= INLINE_CAPACITY else None
        with self._call(request):
            agreement = self.negotiator.negotiate(request, inline)
            if is_root:
                if not agreement.all_inline:
                    alg.broadcast(self.transport, data.copy(), root_rank, self.chunk_bytes)
                return obj
            length = agreement.varying(root_rank)
            if agreement.all_inline:
                received = agreement.inline(root_rank, data.dtype, length).copy()
            else:
                received = np.empty(length, np.uint8)
                alg.broadcast(self.transport, received, root_rank, self.chunk_bytes)
        return pickle.loads(received.data)

    def allgather_object(self, obj: Any, name: str | None = None) -> list[Any]:
        payload = np.frombuffer(pickle.dumps(obj), np.uint8)
        request = Request(OpKind.ALLGATHER_OBJECT, name, varying=len(payload))
        inline = payload if len(payload) <= INLINE_CAPACITY else None
        with self._call(request):
            agreement = self.negotiator.negotiate(request, inline)
            lengths = [agreement.varying(i) for i in range(self.size)]
            segments = alg.to_segments(lengths)
            if agreement.all_inline:
                pieces = [agreement.inline(i, payload.dtype, n).tobytes()
                          for i, n in enumerate(lengths)]
            else:
                out = np.empty(sum(lengths), np.uint8)
                offset, length = segments[self.rank]
                out[offset:offset + length] = payload
                alg.ring_allgather(self.transport, out, segments)
                pieces = [out[o:o + n].tobytes() for o, n in segments]
        return [pickle.loads(piece) for piece in pieces]

    # -- plumbing -----------------------------------------------------------------------

    def _call(self, request: Request) -> _Guard:
        """A context that serializes calls and turns a transport failure into an error
        naming the call; the communicator is unusable afterwards (its peers' streams may
        be mid-message)."""
        return _Guard(self, request)

    def _failed(self, exc: PeerFailureError | CollectiveTimeout,
                request: Request) -> CollectiveError:
        label = title(request.kind, request.name)
        self._failure = str(exc)
        abort = getattr(self.transport, "abort", None)
        if abort is not None:
            abort(f"rank {self.rank}: {label}: {exc}")
        return type(exc)(f"{label}: {exc}")

    def _refuse(self, request: Request) -> PeerFailureError:
        return PeerFailureError(f"{title(request.kind, request.name)}: the job failed earlier "
                                f"({self._failure}); call shutdown() and init() to start "
                                "again")

    def _root_error(self, root: int) -> str | None:
        if isinstance(root, (int, np.integer)) and 0 <= root < self.size:
            return None
        return f"root_rank={root!r} is not a rank of this job; use 0..{self.size - 1}"


def reduce_views(plan: Any, tensor: np.ndarray, inplace: bool) -> np.ndarray:
    """Every rank's inline data (``plan.views``, shaped like ``tensor``) reduced with
    ``plan.ufunc`` in rank order: into ``tensor`` in place, else into a new array. Two
    ranks and a result of at least one dimension (``plan.plain``) take one ufunc call
    that makes the result (the common case of a tiny allreduce's latency)."""
    views = plan.views
    if plan.plain and not inplace:
        return plan.ufunc(views[0], views[1])
    out = tensor if inplace else np.empty_like(views[0])
    alg.reduce_blocks(plan.ufunc, views, out)
    return out


def _finish_reduction(out: np.ndarray, op: ReduceOp, size: int, postscale: float) -> None:
    if op == ReduceOp.AVERAGE:
        average(out, size, postscale)
    else:
        scale(out, postscale)


def _deliver(arr: np.ndarray, flat: np.ndarray, inplace: bool) -> np.ndarray:
    """Shape the result like ``arr``; in-place calls write it back into ``arr``."""
    result = flat.reshape(arr.shape)
    if inplace and not np.may_share_memory(result, arr):
        arr[...] = result
        return arr
    return arr if inplace else result
