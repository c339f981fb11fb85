"""The coordinator's judgement: agreed ops and the errors every rank raises."""

from __future__ import annotations

import numpy as np
import pytest

from gcurun.runtime.api import ArgumentError, MismatchError, ReduceOp
from gcurun.runtime.engine.requests import Agreed, Op, OpKind, agree, describe, disagreement_error


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


def test_argument_errors() -> None:
    bad = desc(1)
    bad["error"] = "splits=[9] must be 2 non-negative integers"
    error = agree({0: desc(0), 1: bad}, 2)
    assert isinstance(error, ArgumentError) and "rank 1: splits=[9]" in str(error)


@pytest.mark.parametrize("kind", [OpKind.ALLGATHER, OpKind.ALLTOALL, OpKind.BROADCAST,
                                  OpKind.BROADCAST_OBJECT, OpKind.ALLGATHER_OBJECT])
def test_gathers_and_broadcasts_need_every_rank(kind: OpKind) -> None:
    # Horovod's rule: with a joined rank only the reductions go on.
    error = agree({1: desc(1, kind, (4, 3), root=1)}, 3, frozenset({0, 2}))
    assert isinstance(error, ArgumentError)
    assert f"{kind.label} 't': rank(s) 0, 2 called join()" in str(error)


@pytest.mark.parametrize("kind", [OpKind.ALLREDUCE, OpKind.REDUCESCATTER])
def test_reductions_go_on_without_joined_ranks(kind: OpKind) -> None:
    agreed = agree({1: desc(1, kind, (4, 3))}, 2, frozenset({0}))
    assert isinstance(agreed, Agreed) and agreed.shape == (4, 3)


# -- the one error every rank raises when the ranks' calls disagree -----------------


def description(rank: int, **over) -> dict:
    base = {"rank": rank, "op": "allreduce", "name": "grad/w", "dtype": "float32",
            "shape": [3, 4], "reduce_op": "Sum", "root": -1, "chunk_bytes": 1 << 20,
            "error": None}
    return {**base, **over}


def test_a_shape_mismatch_names_the_op_tensor_and_every_shape() -> None:
    error = disagreement_error([description(0), description(1, shape=[3, 5]), description(2)])
    assert isinstance(error, MismatchError)
    assert str(error) == (
        "allreduce 'grad/w': ranks disagree on the shape; every rank must call allreduce "
        "with the same name, shape, dtype, op and root:\n"
        "  rank 0: allreduce 'grad/w' float32 shape (3, 4) op Sum\n"
        "  rank 1: allreduce 'grad/w' float32 shape (3, 5) op Sum\n"
        "  rank 2: allreduce 'grad/w' float32 shape (3, 4) op Sum")


def test_several_differences_are_all_named() -> None:
    error = disagreement_error([description(0), description(1, dtype="float64", reduce_op="Max")])
    assert "ranks disagree on the dtype and the reduce op;" in str(error)


def test_allgather_rows_may_differ_but_not_the_rest() -> None:
    rows = [description(r, op="allgather", shape=[r + 1, 4 + (r == 1)], reduce_op=None)
            for r in range(2)]
    error = disagreement_error(rows)
    assert "ranks disagree on the shape; every rank must call allgather with the same " \
           "name, dtype and shape apart from the first dimension" in str(error)


def test_invalid_arguments_on_one_rank_stop_every_rank() -> None:
    error = disagreement_error([description(0), description(1, error="splits=[1] must be 2 ...")])
    assert isinstance(error, ArgumentError) and isinstance(error, ValueError)
    assert str(error) == ("allreduce 'grad/w': invalid arguments, so every rank stopped this "
                          "call:\n  rank 1: splits=[1] must be 2 ...")


def test_unnamed_tensors_and_different_chunk_settings() -> None:
    error = disagreement_error([description(0, name=None), description(1, name=None,
                                                                  chunk_bytes=4096)])
    assert str(error).startswith("allreduce (unnamed): ranks disagree on GCURUN_CHUNK_BYTES")
