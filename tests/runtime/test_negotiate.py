"""The one error every rank raises when the ranks' calls disagree."""

from __future__ import annotations

from gcurun.runtime.api import ArgumentError, MismatchError
from gcurun.runtime.negotiate import disagreement_error


def describe(rank: int, **over) -> dict:
    base = {"rank": rank, "op": "allreduce", "name": "grad/w", "dtype": "float32",
            "shape": [3, 4], "reduce_op": "Sum", "root": -1, "chunk_bytes": 1 << 20,
            "error": None}
    return {**base, **over}


def test_a_shape_mismatch_names_the_op_tensor_and_every_shape() -> None:
    error = disagreement_error([describe(0), describe(1, shape=[3, 5]), describe(2)])
    assert isinstance(error, MismatchError)
    assert str(error) == (
        "allreduce 'grad/w': ranks disagree on the shape; every rank must call allreduce "
        "with the same name, shape, dtype, op and root:\n"
        "  rank 0: allreduce 'grad/w' float32 shape (3, 4) op Sum\n"
        "  rank 1: allreduce 'grad/w' float32 shape (3, 5) op Sum\n"
        "  rank 2: allreduce 'grad/w' float32 shape (3, 4) op Sum")


def test_several_differences_are_all_named() -> None:
    error = disagreement_error([describe(0), describe(1, dtype="float64", reduce_op="Max")])
    assert "ranks disagree on the dtype and the reduce op;" in str(error)


def test_allgather_rows_may_differ_but_not_the_rest() -> None:
    rows = [describe(r, op="allgather", shape=[r + 1, 4 + (r == 1)], reduce_op=None)
            for r in range(2)]
    error = disagreement_error(rows)
    assert "ranks disagree on the shape; every rank must call allgather with the same " \
           "name, dtype and shape apart from the first dimension" in str(error)


def test_invalid_arguments_on_one_rank_stop_every_rank() -> None:
    error = disagreement_error([describe(0), describe(1, error="splits=[1] must be 2 ...")])
    assert isinstance(error, ArgumentError) and isinstance(error, ValueError)
    assert str(error) == ("allreduce 'grad/w': invalid arguments, so every rank stopped this "
                          "call:\n  rank 1: splits=[1] must be 2 ...")


def test_unnamed_tensors_and_different_chunk_settings() -> None:
    error = disagreement_error([describe(0, name=None), describe(1, name=None,
                                                                  chunk_bytes=4096)])
    assert str(error).startswith("allreduce (unnamed): ranks disagree on GCURUN_CHUNK_BYTES")
