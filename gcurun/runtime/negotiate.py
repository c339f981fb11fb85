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
from dataclasses import dataclass

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
BLOCK = 256
INLINE_CAPACITY = BLOCK - HEADER.size
MAGIC = 0x6763
INLINE = 1
NO_OP = 255
# Ops where each rank contributes its own number of rows (the first dimension).
VARYING_ROWS = (OpKind.ALLGATHER, OpKind.ALLTOALL)
# Ops where the root's data decides; the other ranks' inline flags do not matter.
ROOTED = (OpKind.BROADCAST, OpKind.BROADCAST_OBJECT)


@dataclass(frozen=True)
class Request:
    """What one rank asks of a collective."""

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


def title(kind: OpKind, name: str | None) -> str:
    return f"{kind.label} {name!r}" if name else f"{kind.label} (unnamed tensor)"


class Agreement:
    """The gathered blocks of one negotiation: every rank's varying value and inline data."""

    def __init__(self, gathered: np.ndarray, size: int, all_inline: bool):
        self._gathered = gathered
        self.size = size
        self.all_inline = all_inline

    def varying(self, rank: int) -> int:
        return VARYING.unpack_from(self._gathered, rank * BLOCK + VARYING_OFFSET)[0]

    def inline(self, rank: int, dtype: np.dtype, count: int) -> np.ndarray:
        start = rank * BLOCK + HEADER.size
        return self._gathered[start:start + count * dtype.itemsize].view(dtype)


class Negotiator:
    """Runs the header exchange of each collective over one transport."""

    def __init__(self, transport: Transport, chunk_bytes: int):
        self.transport = transport
        self.chunk_bytes = chunk_bytes
        size = transport.size
        self._block = np.zeros(BLOCK, np.uint8)
        self._work = np.zeros(size * BLOCK, np.uint8)
        self._gathered = np.zeros(size * BLOCK, np.uint8)
        self._invariants: dict[tuple, bytes] = {}

    def negotiate(self, request: Request, inline: np.ndarray | None = None) -> Agreement:
        """Exchange headers; return the agreement or raise the same error on every rank.

        ``inline`` (flat, contiguous, at most INLINE_CAPACITY bytes) rides in the block.
        """
        invariant = self._invariant(request)
        block = self._block
        block[:INVARIANT_BYTES] = np.frombuffer(invariant, np.uint8)
        flags = 0
        if inline is not None:
            flags = INLINE
            raw = inline.view(np.uint8)
            block[HEADER.size:HEADER.size + len(raw)] = raw
        VARYING.pack_into(block, VARYING_OFFSET, request.varying, flags)
        size = self.transport.size
        bruck_allgather(self.transport, block, self._work, self._gathered)
        gathered = self._gathered.tobytes()
        agreed = True
        inline_count = 0
        for rank in range(size):
            start = rank * BLOCK
            if gathered[start:start + INVARIANT_BYTES] != invariant:
                agreed = False
            inline_count += gathered[start + VARYING_OFFSET + 8] & INLINE
        if not agreed or request.error is not None:
            self._raise_disagreement(request)
        if request.kind in ROOTED:
            all_inline = bool(gathered[request.root * BLOCK + VARYING_OFFSET + 8] & INLINE)
        else:
            all_inline = inline_count == size
        return Agreement(self._gathered, size, all_inline)

    def _invariant(self, request: Request) -> bytes:
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

    def _raise_disagreement(self, request: Request) -> None:
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
