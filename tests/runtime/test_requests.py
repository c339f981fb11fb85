"""The coordinator's judgement: agreed ops and the errors every rank raises."""

from __future__ import annotations

import numpy as np

from gcurun.runtime.api import ArgumentError, MismatchError, ReduceOp
from gcurun.runtime.negotiate import OpKind
from gcurun.runtime.requests import Agreed, Op, agree, describe


def desc(rank: int, kind: OpKind = OpKind.ALLREDUCE, shape: tuple = (4,),
         dtype: type = np.float32, **kw: object) -> dict:
    op = Op(kind, "t", np.zeros(shape, dtype), rop=int(ReduceOp.SUM), **kw)  # type: ignore
    return describe(op, rank, False)


def test_agreement_of_matching_descriptions() -> None:
    agreed = agree({0: desc(0), 1: desc(1)}, 2)
    assert agreed == Agreed("t", int(OpKind.ALLREDUCE), 10, (4,), 1, -1, 1.0, 1.0, None,
                            None)
    assert Agreed.from_json(agreed.to_json()) == agreed
    assert agreed.key_for(1) == Op(OpKind.ALLREDUCE, "t", np.zeros(4, np.float32),
                                   rop=1).key


def test_allgather_rows_and_alltoall_splits_per_rank() -> None:
    gathered = agree({0: desc(0, OpKind.ALLGATHER, (2, 3)), 1: desc(1, OpKind.ALLGATHER,
                                                                    (5, 3))}, 2)
    assert gathered.shape == (3,) and gathered.rows == (2, 5)
    joined = agree({1: desc(1, OpKind.ALLGATHER, (5, 3))}, 2, frozenset({0}))
    assert joined.rows == (0, 5)
    a2a = agree({r: desc(r, OpKind.ALLTOALL, (3, 2), splits=(r, 3 - r)) for r in (0, 1)}, 2)
    assert a2a.splits == ((0, 3), (1, 2))


def test_mismatches_name_every_rank() -> None:
    error = agree({0: desc(0), 1: desc(1, shape=(5,))}, 2)
    assert isinstance(error, MismatchError)
    assert "ranks disagree on the shape" in str(error)
    assert "rank 1: allreduce 't' float32 shape (5,) op Sum" in str(error)
    error = agree({0: desc(0), 1: desc(1, postscale=2.0)}, 2)
    assert isinstance(error, MismatchError) and "scale factors" in str(error)
    assert "rank 1: prescale_factor=1 postscale_factor=2" in str(error)


def test_argument_errors_and_a_joined_root() -> None:
    bad = desc(1)
    bad["error"] = "splits=[9] must be 2 non-negative integers"
    error = agree({0: desc(0), 1: bad}, 2)
    assert isinstance(error, ArgumentError) and "rank 1: splits=[9]" in str(error)
    error = agree({1: desc(1, OpKind.BROADCAST, root=0)}, 2, frozenset({0}))
    assert isinstance(error, ArgumentError)
    assert "root rank 0 has called join() and cannot broadcast" in str(error)
