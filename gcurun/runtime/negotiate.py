"""Before any data moves, every rank learns what every other rank asked for.

Each collective starts with one allgather of a fixed 256-byte block per rank: a 56-byte
header (op, dtype, reduce op, root, element count and a digest of the name and shape) and
up to 200 bytes of inline data. Ranks compare the invariant part of the headers; when they
all agree the collective proceeds (and tiny tensors are already complete, their data rode
inline). When they disagree every rank exchanges a full description and raises the same
error, naming the op, the tensor and each rank's shape. No rank is left waiting.
"""

from __future__ import annotations

import enum
import hashlib
import json
import struct
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from gcurun.runtime.algorithms import bruck_allgather
from gcurun.runtime.api import ArgumentError, MismatchError, ReduceOp, Transport
from gcurun.runtime.dtypes import DTYPE_CODES, NO_DTYPE


class OpKind(enum.IntEnum):
    ALLREDUCE = 1
    ALLGATHER = 2
    BROADCAST = 3
    ALLTOALL = 4
    REDUCESCATTER = 5
    BARRIER = 6
    BROADCAST_OBJECT = 7
    ALLGATHER_OBJECT = 8

    @property
    def label(self) -> str:
        return self.name.lower()


# magic, kind, reduce op, dtype, itemsize, error flag, root, count, digest | varying, flags
HEADER = struct.Struct("<HBBBBHqq16sqB7x")
VARYING = struct.Struct("<qB")
INVARIANT_BYTES = 40
VARYING_OFFSET = 40
FLAGS_OFFSET = 48
BLOCK = 256
INLINE_CAPACITY = BLOCK - HEADER.size
MAGIC = 0x6763
INLINE = 1
NO_OP = 255
# Ops where each rank contributes its own number of rows (the first dimension).
VARYING_ROWS = (OpKind.ALLGATHER, OpKind.ALLTOALL)
# Ops where the root's data decides; the other ranks' inline flags do not matter.
ROOTED = (OpKind.BROADCAST, OpKind.BROADCAST_OBJECT)


class Request(NamedTuple):
    """What one rank asks of a collective (a named tuple: built on every call, cheaply)."""

    kind: OpKind
    name: str | None
    dtype: np.dtype | None = None
    shape: tuple[int, ...] = ()
    op: ReduceOp | None = None
    root: int = -1
    varying: int = 0                 # rows (allgather, alltoall) or bytes (objects)
    error: str | None = None         # this rank's arguments were invalid

    @property
    def agreed_shape(self) -> tuple[int, ...]:
        """The part of the shape every rank must pass identically."""
        return self.shape[1:] if self.kind in VARYING_ROWS else self.shape


def prepared_sendrecv(transport: Transport, sendbuf: np.ndarray, dest: int,
                      recvbuf: np.ndarray, source: int) -> Callable[[], None]:
    """A sendrecv of fixed buffers to run many times: the transport's own prepared form
    (MPI persistent requests) when it has one."""
    prepare = getattr(transport, "prepare_sendrecv", None)
    if prepare is not None:
        return prepare(sendbuf, dest, recvbuf, source)
    return lambda: transport.sendrecv(sendbuf, dest, recvbuf, source)


def release_sendrecv(transport: Transport, run: Callable[[], None]) -> None:
    """Free what :func:`prepared_sendrecv` made for ``run``, where the transport holds
    anything (MPI requests, which hold their buffers)."""
    release = getattr(transport, "release_sendrecv", None)
    if release is not None:
        release(run)


def title(kind: OpKind, name: str | None) -> str:
    return f"{kind.label} {name!r}" if name else f"{kind.label} (unnamed tensor)"


class Agreement:
    """The gathered blocks of one negotiation: every rank's varying value and inline data."""

    def __init__(self, gathered: np.ndarray, size: int, all_inline: bool):
        self._gathered = gathered
        self.size = size
        self.all_inline = all_inline

    def varying(self, rank: int) -> int:
        return VARYING.unpack_from(self._gathered.data, rank * BLOCK + VARYING_OFFSET)[0]

    def inline(self, rank: int, dtype: np.dtype, count: int) -> np.ndarray:
        start = rank * BLOCK + HEADER.size
        return self._gathered[start:start + count * dtype.itemsize].view(dtype)


class Negotiator:
    """Runs the header exchange of each collective over one transport."""

    def __init__(self, transport: Transport, chunk_bytes: int):
        self.transport = transport
        self.chunk_bytes = chunk_bytes
        size, rank = transport.size, transport.rank
        # Every rank's block in rank order; this rank builds its own in place.
        self.gathered = np.zeros(size * BLOCK, np.uint8)
        self.mine = self.gathered[rank * BLOCK:(rank + 1) * BLOCK]
        self._view = self.gathered.data
        self._work = np.zeros(size * BLOCK, np.uint8)
        # exchange() gathers every rank's block into ``gathered``: two ranks swap blocks in
        # one prepared exchange, more use Bruck's allgather.
        self.exchange: Callable[[], None] = self._allgather
        if size == 2:
            peer = 1 - rank
            self.exchange = prepared_sendrecv(transport, self.mine, peer,
                                              self.gathered[peer * BLOCK:][:BLOCK], peer)
        # Where the other ranks' invariants land.
        self._others = [self._view[r * BLOCK:][:INVARIANT_BYTES] for r in range(size)
                        if r != rank]
        self._invariants: dict[tuple, bytes] = {}
        # Whoever last wrote this rank's header (a fast path may reuse it unchanged).
        self.header_owner: object = None

    def negotiate(self, request: Request, inline: np.ndarray | None = None) -> Agreement:
        """Exchange headers; return the agreement or raise the same error on every rank.

        ``inline`` (flat, contiguous, at most INLINE_CAPACITY bytes) rides in the block.
        The agreement's views stay valid until the next negotiation.
        """
        invariant = self.invariant(request)
        self.write_header(invariant, request.varying, INLINE if inline is not None else 0)
        self.header_owner = None
        if inline is not None:
            raw = inline.view(np.uint8)
            self.mine[HEADER.size:HEADER.size + len(raw)] = raw
        self.exchange()
        if not self.agreed(invariant) or request.error is not None:
            self.raise_disagreement(request)
        return Agreement(self.gathered, self.transport.size, self.all_inline(request))

    def write_header(self, invariant: bytes, varying: int, flags: int) -> None:
        self._view[self.transport.rank * BLOCK:][:INVARIANT_BYTES] = invariant
        VARYING.pack_into(self.mine.data, VARYING_OFFSET, varying, flags)

    def _allgather(self) -> None:
        if self.transport.size > 1:
            bruck_allgather(self.transport, self.mine, self._work, self.gathered)

    def agreed(self, invariant: bytes) -> bool:
        """Whether every rank's header carries ``invariant``."""
        others = self._others
        if len(others) == 1:
            return others[0] == invariant
        for header in others:
            if header != invariant:
                return False
        return True

    def all_inline(self, request: Request) -> bool:
        view = self._view
        if request.kind in ROOTED:
            return bool(view[request.root * BLOCK + FLAGS_OFFSET] & INLINE)
        return all(view[start + FLAGS_OFFSET] & INLINE for start in range(0, len(view), BLOCK))

    def invariant(self, request: Request) -> bytes:
        """The header bytes every rank's call must match (cached per call signature)."""
        key = (request.kind, request.name, request.dtype, request.shape, request.op,
               request.root, request.error)
        cached = self._invariants.get(key)
        if cached is not None:
            return cached
        agreed = request.agreed_shape
        digest = hashlib.blake2b(repr((request.name, agreed, self.chunk_bytes)).encode(),
                                 digest_size=16).digest()
        dtype = request.dtype
        count = int(np.prod(agreed, dtype=np.int64)) if agreed else 1
        header = HEADER.pack(
            MAGIC, request.kind, NO_OP if request.op is None else request.op,
            NO_DTYPE if dtype is None else DTYPE_CODES.get(dtype, NO_DTYPE),
            0 if dtype is None else dtype.itemsize, 0 if request.error is None else 1,
            request.root, count, digest, 0, 0)
        if len(self._invariants) > 4096:
            self._invariants.clear()
        invariant = header[:INVARIANT_BYTES]
        self._invariants[key] = invariant
        return invariant

    def raise_disagreement(self, request: Request) -> None:
        descriptions = [json.loads(text) for text in self.allgather_bytes(
            json.dumps(_describe(request, self.transport.rank, self.chunk_bytes)).encode())]
        raise disagreement_error(descriptions)

    def allgather_bytes(self, payload: bytes) -> list[bytes]:
        """Gather one byte string of any length from every rank (control path only)."""
        t = self.transport
        length = np.array([len(payload)], np.int64).view(np.uint8)
        lengths = np.zeros(8 * t.size, np.uint8)
        bruck_allgather(t, length, np.zeros_like(lengths), lengths)
        sizes = lengths.view(np.int64)
        width = int(sizes.max())
        mine = np.zeros(width, np.uint8)
        mine[:len(payload)] = np.frombuffer(payload, np.uint8)
        everything = np.zeros(width * t.size, np.uint8)
        bruck_allgather(t, mine, np.zeros_like(everything), everything)
        return [everything[i * width:i * width + int(sizes[i])].tobytes() for i in range(t.size)]


def _describe(request: Request, rank: int, chunk_bytes: int) -> dict:
    return {
        "rank": rank,
        "op": request.kind.label,
        "name": request.name,
        "dtype": None if request.dtype is None else str(request.dtype),
        "shape": list(request.shape),
        "reduce_op": None if request.op is None else request.op.title,
        "root": request.root,
        "chunk_bytes": chunk_bytes,
        "error": request.error,
    }


def _show(d: dict) -> str:
    parts = [d["op"], repr(d["name"]) if d["name"] else "(unnamed)"]
    if d["dtype"] is not None:
        parts.append(f"{d['dtype']} shape {tuple(d['shape'])}")
    if d["reduce_op"] is not None:
        parts.append(f"op {d['reduce_op']}")
    if d["root"] >= 0:
        parts.append(f"root {d['root']}")
    return " ".join(parts)


def disagreement_error(descriptions: list[dict]) -> MismatchError | ArgumentError:
    """The one error every rank raises, built only from the gathered descriptions."""
    first = descriptions[0]
    head = f"{first['op']} {first['name']!r}" if first["name"] else f"{first['op']} (unnamed)"
    errors = [d for d in descriptions if d["error"]]
    if errors:
        lines = [f"  rank {d['rank']}: {d['error']}" for d in errors]
        return ArgumentError(f"{head}: invalid arguments, so every rank stopped this call:\n"
                             + "\n".join(lines))
    fields = []
    if len({d["op"] for d in descriptions}) > 1:
        fields.append("the collective")
    if len({d["name"] for d in descriptions}) > 1:
        fields.append("the tensor name")
    if len({d["dtype"] for d in descriptions}) > 1:
        fields.append("the dtype")
    varying_rows = first["op"] in ("allgather", "alltoall")
    if len({tuple(d["shape"][1:] if varying_rows else d["shape"])
            for d in descriptions}) > 1:
        fields.append("the shape")
    if len({d["reduce_op"] for d in descriptions}) > 1:
        fields.append("the reduce op")
    if len({d["root"] for d in descriptions}) > 1:
        fields.append("the root rank")
    if len({d["chunk_bytes"] for d in descriptions}) > 1:
        fields.append("GCURUN_CHUNK_BYTES")
    rule = ("the same name, dtype and shape apart from the first dimension" if varying_rows
            else "the same name, shape, dtype, op and root")
    lines = [f"  rank {d['rank']}: {_show(d)}" for d in descriptions]
    return MismatchError(f"{head}: ranks disagree on {' and '.join(fields) or 'the call'}; "
                         f"every rank must call {first['op']} with {rule}:\n"
                         + "\n".join(lines))
