"""What the engine negotiates: a rank's submitted op, its description for the coordinator,
and the agreed op every rank runs.

:func:`agree` is the coordinator's judgement, pure: the descriptions every rank sent for
one tensor name in, the agreed op (or the one error every rank raises) out. A mismatch
becomes :func:`disagreement_error`, the one error every rank raises, naming the op, the
tensor and each rank's call.
"""

from __future__ import annotations

import enum
import math
import threading
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from gcurun.runtime.api import ArgumentError, MismatchError, ReduceOp
from gcurun.runtime.dtypes import DTYPE_CODES, DTYPES, NO_DTYPE


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


def title(kind: OpKind, name: str | None) -> str:
    return f"{kind.label} {name!r}" if name else f"{kind.label} (unnamed tensor)"


# Ops whose first dimension may differ between ranks.
VARYING_ROWS = (OpKind.ALLGATHER, OpKind.ALLTOALL)
# Ops that cannot run while some rank has joined (it has no data for them): Horovod's rule.
NEEDS_EVERY_RANK = (OpKind.ALLGATHER, OpKind.ALLTOALL, OpKind.BROADCAST,
                    OpKind.BROADCAST_OBJECT, OpKind.ALLGATHER_OBJECT)
# Ops whose agreement can be cached: everything a rank must match is known to it locally.
CACHEABLE = (OpKind.ALLREDUCE, OpKind.ALLGATHER, OpKind.BROADCAST, OpKind.REDUCESCATTER,
             OpKind.BARRIER)

PENDING, AGREED, DONE = 0, 1, 2
ALLREDUCE = int(OpKind.ALLREDUCE)
_NOTHING = np.empty(0, np.uint8)
# Orders an op's completion against a waiter arming its event (see Op.wait).
_ARMING = threading.Lock()


class Op:
    """One collective submitted by this rank, from submission to completion."""

    __slots__ = ("kind", "name", "arr", "src", "inplace", "dtype", "code", "shape", "rop",
                 "root", "prescale", "postscale", "splits", "error", "submitted_ns", "_event",
                 "result", "exception", "position", "sent", "state", "key", "auto",
                 "thread", "checked")

    def __init__(self, kind: OpKind, name: str, arr: np.ndarray | None = None,
                 src: np.ndarray | None = None, *, inplace: bool = False,
                 rop: int = -1, root: int = -1, prescale: float = 1.0,
                 postscale: float = 1.0, splits: tuple[int, ...] | None = None,
                 error: str | None = None, auto: bool = False):
        self.kind = kind
        self.name = name
        self.auto = auto                # the engine named it (the caller gave no name)
        # An unnamed op's thread, which every rank's op of its name must share (None: a
        # thread Python did not start, whose name differs between ranks); and whether
        # the coordinator must see it every time (unnamed ops from several threads).
        self.thread = thread_tag() if auto else None
        self.checked = False
        # The caller's array (results are shaped like it) and its flat contiguous data;
        # ops without data (barrier) and ops with bad arguments (never run) have none.
        self.arr: np.ndarray = _NOTHING if arr is None else arr
        self.src: np.ndarray = _NOTHING if src is None else src
        self.inplace = inplace
        self.dtype = None if arr is None else arr.dtype
        self.code = NO_DTYPE if arr is None else DTYPE_CODES.get(arr.dtype, NO_DTYPE)
        self.shape: tuple[int, ...] = () if arr is None else tuple(arr.shape)
        self.rop = rop
        self.root = root
        self.prescale = float(prescale)
        self.postscale = float(postscale)
        self.splits = splits
        self.error = error
        self.submitted_ns = time.monotonic_ns()
        self._event: threading.Event | None = None    # made only when a thread waits
        self.result: Any = None
        self.exception: BaseException | None = None
        self.position = -1              # its entry in the response cache, or -1
        self.sent = False               # its description went to the coordinator
        self.state = PENDING
        if kind is OpKind.ALLREDUCE:        # the usual op, its key written out flat
            self.key = (ALLREDUCE, self.code, self.shape, rop, root, self.prescale,
                        self.postscale, -1)
        else:
            self.key = match_key(kind, self.code, agreed_shape(kind, self.shape), rop, root,
                                 self.prescale, self.postscale,
                                 self.shape[0] if kind == OpKind.ALLGATHER and self.shape
                                 else -1)

    @property
    def title(self) -> str:
        return title(self.kind, self.name)

    @property
    def cacheable(self) -> bool:
        return self.kind in CACHEABLE and self.error is None and not self.checked

    def finish(self, result: Any = None, exception: BaseException | None = None) -> None:
        self.result, self.exception = result, exception
        with _ARMING:
            self.state = DONE
            event = self._event
        if event is not None:
            event.set()

    def wait(self, timeout: float) -> bool:
        """Block until the op is done (True) or ``timeout`` seconds pass (False). Most
        ops finish on the thread that waits for them, so the event is made on demand."""
        if self.state == DONE:
            return True
        with _ARMING:
            if self.state == DONE:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)


class Agreed(NamedTuple):
    """The op every rank runs for one name, as the coordinator decided it."""

    name: str
    kind: int
    code: int
    shape: tuple[int, ...]            # the agreed shape (without the first dimension for
    rop: int                          # allgather and alltoall)
    root: int
    prescale: float
    postscale: float
    rows: tuple[int, ...] | None      # allgather: every rank's first dimension
    splits: tuple[tuple[int, ...], ...] | None     # alltoall: rows from rank i to rank j

    @property
    def op_kind(self) -> OpKind:
        return OpKind(self.kind)

    @property
    def dtype(self) -> np.dtype:
        return DTYPES[self.code]

    @property
    def elements(self) -> int:
        """Elements of the agreed shape."""
        return math.prod(self.shape)

    def key_for(self, rank: int) -> tuple:
        """What ``rank``'s op must match to use this agreement (see :attr:`Op.key`)."""
        if self.kind == ALLREDUCE:          # checked for every pending op every cycle
            return (ALLREDUCE, self.code, self.shape, self.rop, self.root, self.prescale,
                    self.postscale, -1)
        rows = self.rows[rank] if self.rows is not None else -1
        return match_key(OpKind(self.kind), self.code, self.shape, self.rop, self.root,
                         self.prescale, self.postscale, rows)

    def to_json(self) -> list:
        return [self.name, self.kind, self.code, list(self.shape), self.rop, self.root,
                self.prescale, self.postscale,
                None if self.rows is None else list(self.rows),
                None if self.splits is None else [list(s) for s in self.splits]]

    @classmethod
    def from_json(cls, item: list) -> Agreed:
        name, kind, code, shape, rop, root, pre, post, rows, splits = item
        return cls(name, kind, code, tuple(shape), rop, root, pre, post,
                   None if rows is None else tuple(rows),
                   None if splits is None else tuple(tuple(s) for s in splits))


def agreed_shape(kind: OpKind, shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[1:] if kind in VARYING_ROWS else shape


def match_key(kind: OpKind, code: int, shape: tuple[int, ...], rop: int, root: int,
              prescale: float, postscale: float, rows: int) -> tuple:
    return (int(kind), code, shape, rop, root, prescale, postscale, rows)


def describe(op: Op, rank: int, conflict: bool) -> dict[str, Any]:
    """What ``rank`` tells the coordinator about ``op``. ``conflict``: the rank found a
    cached agreement under this name that its op does not match."""
    return {
        "rank": rank, "op": op.kind.label, "name": op.name,
        "dtype": None if op.dtype is None else str(op.dtype), "shape": list(op.shape),
        "reduce_op": None if op.rop < 0 else ReduceOp(op.rop).title, "root": op.root,
        "chunk_bytes": 0, "error": op.error, "kind": int(op.kind), "code": op.code,
        "rop": op.rop, "pre": op.prescale, "post": op.postscale,
        "splits": None if op.splits is None else list(op.splits), "conflict": conflict,
        "thread": op.thread,
    }


def thread_tag() -> str | None:
    """The calling thread's name, the same on every rank for threads a script starts in
    the same order (``MainThread``, ``Thread-1 (work)``); None for threads that Python
    did not start (a framework's pool), whose names differ between ranks."""
    thread = threading.current_thread()
    return None if isinstance(thread, threading._DummyThread) else thread.name


def agree(descriptions: Mapping[int, dict[str, Any]], size: int,
          joined: frozenset[int] = frozenset()) -> Agreed | MismatchError | ArgumentError:
    """The coordinator's decision for one name, once every rank that has not joined
    described it. Joined ranks take part with neutral data (see :mod:`engine`)."""
    descs = [descriptions[r] for r in sorted(descriptions)]
    first = descs[0]
    if any(d["error"] for d in descs) or _differs(descs):
        return disagreement_error(descs)
    threads = {d.get("thread") for d in descs}
    if len(threads) > 1 and None not in threads:
        return _threads_error(descs)
    if len({(d["pre"], d["post"]) for d in descs}) > 1:
        lines = [f"  rank {d['rank']}: prescale_factor={d['pre']:g} "
                 f"postscale_factor={d['post']:g}" for d in descs]
        return MismatchError(f"{first['op']} {first['name']!r}: ranks disagree on the scale "
                             "factors; every rank must pass the same prescale_factor and "
                             "postscale_factor:\n" + "\n".join(lines))
    kind = OpKind(first["kind"])
    if joined and kind in NEEDS_EVERY_RANK:
        ranks = ", ".join(str(r) for r in sorted(joined))
        return ArgumentError(f"{first['op']} {first['name']!r}: rank(s) {ranks} called "
                             f"join(), and {first['op']} needs data from every rank (as in "
                             "Horovod, only reductions go on with joined ranks); call it "
                             "before join(), or after every rank has joined")
    rows = splits = None
    if kind == OpKind.ALLGATHER:
        rows = tuple(descriptions[r]["shape"][0] if r in descriptions else 0
                     for r in range(size))
    elif kind == OpKind.ALLTOALL:
        splits = tuple(tuple(descriptions[r]["splits"]) if r in descriptions
                       else (0,) * size for r in range(size))
    return Agreed(first["name"], int(kind), first["code"],
                  agreed_shape(kind, tuple(first["shape"])), first["rop"], first["root"],
                  first["pre"], first["post"], rows, splits)


def _threads_error(descs: list[dict[str, Any]]) -> ArgumentError:
    """Every rank's error for an unnamed op that came from different threads."""
    first = descs[0]
    lines = [f"  rank {d['rank']}: thread {d['thread']!r}" for d in descs]
    return ArgumentError(
        f"{first['op']} {first['name']!r}: this unnamed op came from different threads on "
        "different ranks, so it would have combined unrelated tensors; unnamed ops are "
        "matched across ranks by the order of the calls, which threads calling at once "
        "do not keep. Give each op a name (name=...), the same on every rank:\n"
        + "\n".join(lines))


def _differs(descs: list[dict[str, Any]]) -> bool:
    first = descs[0]
    kind = first["kind"]
    shape = agreed_shape(OpKind(kind), tuple(first["shape"]))
    for d in descs[1:]:
        if (d["kind"], d["code"], d["rop"], d["root"]) != (kind, first["code"], first["rop"],
                                                           first["root"]):
            return True
        if agreed_shape(OpKind(d["kind"]), tuple(d["shape"])) != shape:
            return True
    return False


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
