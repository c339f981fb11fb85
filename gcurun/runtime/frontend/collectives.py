"""The synchronous collectives on one engine (the job's or a process set's): every
call is an op of the engine, submitted and waited for, or a quick cycle."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gcurun.runtime.api import ArgumentError, ReduceOp
from gcurun.runtime.engine.background import Engine
from gcurun.runtime.engine.quick_negotiation import QuickPlan
from gcurun.runtime.engine.requests import Op, OpKind
from gcurun.runtime.frontend.arguments import checked_reduce_op, reduce_error
from gcurun.runtime.frontend.build import (
    allgather_op,
    allreduce_op,
    alltoall_op,
    broadcast_op,
    op_name,
    reducescatter_op,
    root_of,
)


class Collectives:
    """The synchronous collectives of one engine. ``members``: the job's ranks of a
    process set's engine (roots are ranks of the job), None for the job's engine."""

    def __init__(self, engine: Engine, members: Sequence[int] | None = None):
        self.engine = engine
        self.members = None if members is None else list(members)
        self.rank, self.size = engine.rank, engine.size
        # By name, the engine's quick allreduce of the name's latest signature; by
        # signature, every plan made (None: arguments the usual path reports).
        self._quick: dict[str | None, Callable[..., np.ndarray]] = {}
        self._plans: dict[tuple, QuickPlan | None] = {}
        self._general = self._allreduce         # bound once: calls of new signatures

    def _run(self, op: Op) -> Any:
        return self.engine.run_now(op)

    def allreduce(self, tensor: Any, op: Any = ReduceOp.AVERAGE, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0, name: str | None = None,
                  inplace: bool = False) -> np.ndarray:
        # One line: it is part of the latency of tiny allreduces (the repeated call of a
        # name goes straight to its quick allreduce, which checks the signature).
        return self._quick.get(name, self._general)(tensor, op, prescale_factor,
                                                    postscale_factor, name, inplace)

    def _allreduce(self, tensor: Any, op: Any, prescale: float, postscale: float,
                   name: str | None, inplace: bool) -> np.ndarray:
        """allreduce of a signature new to the name (or of an unnamed tensor)."""
        auto = name is None
        if auto:
            name = self.engine.auto_name("allreduce")
            if self.engine.auto_shared:     # (where calls of several threads are checked)
                return self._usual(tensor, op, prescale, postscale, name, inplace, True)
        plan = self._plan(tensor, op, str(name), prescale, postscale)
        if plan is None or plan.run is None:
            return self._usual(tensor, op, prescale, postscale, name, inplace, auto)
        return plan.run(tensor, op, prescale, postscale, name, inplace, auto, True)

    def _usual(self, tensor: Any, op: Any, prescale: float, postscale: float,
               name: str | None, inplace: bool, auto: bool = False) -> np.ndarray:
        """allreduce as an op of the engine, submitted and waited for."""
        return self._run(allreduce_op(self.engine, tensor, op=op, prescale=prescale,
                                      postscale=postscale, name=name, inplace=inplace,
                                      auto=auto))

    def _plan(self, tensor: Any, op: Any, name: str, prescale: float,
              postscale: float) -> QuickPlan | None:
        """The quick plan of this call's signature (made once), or None when the call
        must take the usual path."""
        if type(tensor) is not np.ndarray or prescale != 1.0:
            return None
        key = (tensor.dtype, tensor.shape, op, name, postscale)
        try:
            plan = self._plans[key]
        except KeyError:
            rop, error = checked_reduce_op(op)
            plan = None
            if not (error or reduce_error(tensor, rop, 1.0, postscale)):
                plan = self.engine.controller.plan_quick(name, tensor, op, rop, postscale)
                plan.run = self.engine.quick_allreduce(plan, self._general, self._usual)
            if len(self._plans) >= 4096:
                self._plans.clear()
                self._quick.clear()
            self._plans[key] = plan
        if plan is not None and plan.run is not None:
            self._quick[name] = plan.run        # the name's latest signature takes over
        return plan

    def reducescatter(self, tensor: Any, op: Any = ReduceOp.AVERAGE,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      name: str | None = None) -> np.ndarray:
        return self._run(reducescatter_op(self.engine, tensor, op=op,
                                          prescale=prescale_factor,
                                          postscale=postscale_factor, name=name))

    def allgather(self, tensor: Any, name: str | None = None) -> np.ndarray:
        return self._run(allgather_op(self.engine, tensor, name=name))

    def broadcast(self, tensor: Any, root_rank: int, name: str | None = None,
                  inplace: bool = False) -> np.ndarray:
        return self._run(broadcast_op(self.engine, tensor, root_rank=root_rank, name=name,
                                      inplace=inplace, members=self.members))

    def alltoall(self, tensor: Any, splits: Sequence[int] | np.ndarray | None = None,
                 name: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self._run(alltoall_op(self.engine, tensor, splits=splits, name=name))

    def barrier(self) -> None:
        self._run(Op(OpKind.BARRIER, self.engine.auto_name(OpKind.BARRIER.label),
                     auto=True))

    def broadcast_object(self, obj: Any, root_rank: int = 0, name: str | None = None) -> Any:
        """``root_rank``'s object, pickled: a broadcast of its size (and whether the root
        could pickle it), then of its bytes. Raises :class:`ArgumentError` on every rank
        when the root cannot pickle the object (its bytes are then the error's text, so
        that no rank waits for data that never comes)."""
        base = op_name(self.engine, name, OpKind.BROADCAST_OBJECT)
        root, _ = root_of(self.engine, root_rank, self.members)
        is_root = root == self.rank
        payload, error = _pickled(obj) if is_root else (b"", None)
        head = self.broadcast(np.array([len(payload), error is not None], np.int64),
                              root_rank, f"{base}.size")
        data = np.frombuffer(payload, np.uint8) if is_root else \
            np.empty(int(head[0]), np.uint8)
        received = self.broadcast(data, root_rank, f"{base}.data")
        if head[1]:
            raise ArgumentError(f"broadcast_object {base!r}: rank {root_rank} (the root) "
                                f"could not pickle its object: "
                                f"{received.tobytes().decode(errors='replace')}"
                                ) from error
        return obj if is_root else pickle.loads(received.data)

    def allgather_object(self, obj: Any, name: str | None = None) -> list[Any]:
        """Every rank's object, pickled: an allgather of sizes (and whether each rank
        could pickle its object), then of the bytes. Raises :class:`ArgumentError` on
        every rank when a rank cannot pickle its object (its bytes are then the error's
        text), naming each such rank."""
        base = op_name(self.engine, name, OpKind.ALLGATHER_OBJECT)
        payload, error = _pickled(obj)
        heads = self.allgather(np.array([[len(payload), error is not None]], np.int64),
                               f"{base}.size")
        everything = self.allgather(np.frombuffer(payload, np.uint8), f"{base}.data")
        pieces, failed, offset = [], [], 0
        for rank, (length, bad) in enumerate(heads.tolist()):
            piece = everything[offset:offset + length]
            offset += length
            if bad:
                who = rank if self.members is None else self.members[rank]
                failed.append(f"rank {who}: {piece.tobytes().decode(errors='replace')}")
            elif not failed:
                pieces.append(pickle.loads(piece.data))
        if failed:
            raise ArgumentError(f"allgather_object {base!r}: a rank could not pickle its "
                                "object (" + "; ".join(failed) + ")") from error
        return pieces


def _pickled(obj: Any) -> tuple[bytes, BaseException | None]:
    """``obj`` pickled, or (when it cannot be) the text of the error, and the error."""
    try:
        return pickle.dumps(obj), None
    except Exception as exc:    # PicklingError, TypeError, AttributeError, RecursionError
        return f"{type(exc).__name__}: {exc}".encode(), exc
