"""gcurun.runtime.torch in this process, alone (the runtime's one-rank backend): staging of
tensors, compression, errors, Adasum's arithmetic, handles, DistributedOptimizer's
arguments and its single-process behaviour."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch",
                            reason="PyTorch is not installed (pip install torch==2.13.0)")

import gcurun.runtime.torch as hvd  # noqa: E402
from gcurun.runtime.api import MismatchError  # noqa: E402
from gcurun.runtime.torch import adasum  # noqa: E402
from gcurun.runtime.torch.compression import (  # noqa: E402
    compress_reusing,
    decompress_into,
    reuses_memory,
)
from gcurun.runtime.torch.errors import internal_error  # noqa: E402
from gcurun.runtime.torch.tensors import stage, to_tensor, write_back  # noqa: E402
from tests.helpers import wait_for  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture
def alone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("GCURUN_RANK", "GCURUN_SIZE", "GCURUN_RENDEZVOUS", "GCURUN_BACKEND",
                 "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    hvd.init()
    yield
    hvd.shutdown()


# -- staging -------------------------------------------------------------------------------


def test_a_contiguous_cpu_tensor_is_handed_over_without_a_copy() -> None:
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    staged = stage(t, "test")
    assert not staged.copied
    assert staged.array.ctypes.data == t.data_ptr()
    staged.array[0, 0] = 42
    assert t[0, 0] == 42
    back = to_tensor(staged.array, t)
    assert back.data_ptr() == t.data_ptr()


@pytest.mark.parametrize("make", [
    lambda: torch.arange(20, dtype=torch.float32).reshape(4, 5)[:, ::2],
    lambda: torch.arange(6).to(torch.bfloat16),
    lambda: torch.arange(6, dtype=torch.float32).reshape(2, 3).t(),
], ids=["strided", "bfloat16", "transposed"])
def test_other_tensors_are_staged_and_written_back(make) -> None:
    t = make()
    staged = stage(t, "test")
    assert staged.copied and staged.array.flags.c_contiguous
    assert np.array_equal(staged.array, t.float().numpy())
    staged.array[...] = 7
    assert write_back(staged) is t
    assert torch.equal(t, torch.full_like(t, 7))
    result = to_tensor(staged.array, t)
    assert result.dtype == t.dtype and result.shape == t.shape


def test_unsupported_inputs_name_the_problem() -> None:
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        stage(torch.zeros(2, dtype=torch.float8_e4m3fn), "allreduce")
    with pytest.raises(TypeError, match="to_dense"):
        stage(torch.zeros(3, 3).to_sparse(), "allreduce")
    with pytest.raises(TypeError, match="got list"):
        stage([1, 2], "allreduce")  # type: ignore[arg-type]


def test_fp16_compression_round_trip() -> None:
    t = torch.tensor([0.5, 1.25, -3.0], dtype=torch.float64)
    sent, ctx = hvd.Compression.fp16.compress(t)
    assert sent.dtype == torch.float16
    back = hvd.Compression.fp16.decompress(sent, ctx)
    assert back.dtype == torch.float64 and torch.equal(back, t)
    ints = torch.arange(3)
    assert hvd.Compression.fp16.compress(ints)[0] is ints
    assert hvd.Compression.none.compress(t) == (t, None)


def test_fp16_casts_into_the_memory_it_is_offered() -> None:
    grad = torch.tensor([0.1, 1.25, -3.0, 65504.0 * 2], dtype=torch.float32)
    spare = torch.full((4,), 9.0, dtype=torch.float16)
    sent, ctx = compress_reusing(hvd.Compression.fp16, grad, spare)
    assert sent is spare and ctx == torch.float32
    assert torch.equal(sent, grad.to(torch.float16))           # the same rounding
    for wrong in (torch.zeros(3, dtype=torch.float16), torch.zeros(4, dtype=torch.float32)):
        fresh, _ = compress_reusing(hvd.Compression.fp16, grad, wrong)
        assert fresh is not wrong and torch.equal(fresh, grad.to(torch.float16))
    assert compress_reusing(hvd.Compression.fp16, grad, None)[0].dtype == torch.float16
    ints = torch.arange(4)
    assert compress_reusing(hvd.Compression.fp16, ints, spare)[0] is ints
    out = torch.zeros(4, dtype=torch.float64)
    decompress_into(hvd.Compression.fp16, sent, torch.float64, out)
    assert torch.equal(out, sent.to(torch.float64))


def test_compressors_without_the_memory_methods_still_work() -> None:
    class Halving:                       # a user's compressor, as Horovod's API has them
        @staticmethod
        def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
            return tensor / 2, None

        @staticmethod
        def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
            return tensor * 2

    assert not reuses_memory(Halving) and reuses_memory(hvd.Compression.fp16)
    grad = torch.tensor([2.0, 4.0])
    sent, ctx = compress_reusing(Halving, grad, torch.zeros(2))
    assert torch.equal(sent, torch.tensor([1.0, 2.0]))
    out = torch.zeros(2)
    decompress_into(Halving, sent, ctx, out)
    assert torch.equal(out, grad)
    same = torch.tensor([5.0])
    decompress_into(hvd.Compression.none, same, None, same)
    assert torch.equal(same, torch.tensor([5.0]))


def test_errors_are_the_runtimes_and_horovods_at_once() -> None:
    cause = MismatchError("allreduce 'x': ranks disagree on the shape")
    error = internal_error(cause)
    assert isinstance(error, MismatchError) and isinstance(error, hvd.HorovodInternalError)
    assert isinstance(error, RuntimeError) and str(error) == str(cause)
    assert internal_error(error) is error


def test_adasum_combines_as_the_formula_says() -> None:
    a, b = np.array([1.0, 0.0]), np.array([0.0, 2.0])
    assert np.array_equal(adasum.combine(a, b), a + b)             # orthogonal: added
    assert np.array_equal(adasum.combine(a, a), a)                 # parallel: kept
    c, d = np.array([3.0, 1.0]), np.array([1.0, 2.0])
    dot = 5.0
    want = (1 - dot / (2 * 10.0)) * c + (1 - dot / (2 * 5.0)) * d
    assert np.allclose(adasum.combine(c, d), want)
    rows = [np.array([1.0, 0, 0]), np.array([0, 1.0, 0]), np.array([0, 0, 1.0])]
    assert np.array_equal(adasum.tree(rows), np.ones(3))
    assert np.array_equal(adasum.combine(np.zeros(2), d), d)


# -- one process ----------------------------------------------------------------------------


def test_handles_are_spent_by_synchronize(alone: None) -> None:
    handle = hvd.allreduce_async(torch.ones(3))
    wait_for("the allreduce to complete", lambda: hvd.poll(handle), timeout=30)
    assert torch.equal(hvd.synchronize(handle), torch.ones(3))
    with pytest.raises(ValueError, match="unknown"):
        hvd.poll(handle)


def test_shutdown_forgets_handles_and_init_works_again(alone: None) -> None:
    handle = hvd.allreduce_async(torch.ones(3))
    hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(hvd.NotInitializedError):
        hvd.allreduce(torch.ones(1))
    hvd.init()
    with pytest.raises(ValueError, match="unknown"):
        hvd.synchronize(handle)
    assert hvd.size() == 1 and hvd.rank() == 0 and hvd.local_rank() == 0


def test_the_built_and_enabled_queries(alone: None) -> None:
    assert hvd.gloo_built() and not hvd.nccl_built() and not hvd.cuda_built()
    assert not hvd.gloo_enabled()   # a job alone runs on the local backend
    assert not hvd.mpi_enabled() and isinstance(hvd.mpi_built(), bool)
    assert hvd.is_homogeneous() and hvd.cross_size() == 1


def _net() -> torch.nn.Module:
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def test_the_wrapped_optimizer_keeps_its_class_settings_and_state(alone: None) -> None:
    model = _net()
    inner = torch.optim.Adam(model.parameters(), lr=0.123, betas=(0.8, 0.9))
    opt = hvd.DistributedOptimizer(inner, named_parameters=model.named_parameters())
    assert isinstance(opt, torch.optim.Adam) and type(opt).__name__ == "Adam"
    assert opt.defaults["lr"] == 0.123 and opt.param_groups is inner.param_groups
    assert opt.state is inner.state


def test_one_process_trains_exactly_like_the_plain_optimizer(alone: None) -> None:
    model, ref = _net(), _net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    for _ in range(3):
        for m, o in ((model, opt), (ref, ref_opt)):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            o.step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), ref.parameters(),
                                                 strict=True))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"named_parameters": [("a", None), ("a", None)]}, "unique"),
    ({"named_parameters": "not pairs"}, "pairs"),
    ({"named_parameters": []}, "does not name"),
    ({"backward_passes_per_step": 0}, "backward_passes_per_step"),
    ({"gradient_predivide_factor": 2.0, "op": hvd.Sum}, "op=Average"),
    ({"groups": -1}, "groups"),
])
def test_bad_arguments_are_refused(alone: None, kwargs: dict, message: str) -> None:
    model = _net()
    if kwargs.get("named_parameters") == [("a", None), ("a", None)]:
        first = next(model.parameters())
        kwargs = {"named_parameters": [("a", first), ("a", first)]}
    with pytest.raises(ValueError, match=message):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), **kwargs)


def test_groups_split_the_parameters_evenly(alone: None) -> None:
    model = _net()
    params = list(model.parameters())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1),
                                   named_parameters=model.named_parameters(), groups=3)
    assert [len(g) for g in opt._group_ready] == [2, 1, 1]
    with pytest.raises(ValueError, match="more than one group"):
        hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1),
                                 groups=[[params[0]], [params[0]]])


def test_broadcast_optimizer_state_keeps_a_fresh_optimizer_fresh(alone: None) -> None:
    model = _net()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    before = copy.deepcopy(model.state_dict())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert not any(opt.state.values())
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    with pytest.raises(ValueError, match="LBFGS"):
        hvd.broadcast_optimizer_state(torch.optim.LBFGS(model.parameters()), root_rank=0)


# -- Horovod's names -----------------------------------------------------------------------


def test_mpi_ops_holds_horovods_names_and_autograd_classes(alone: None) -> None:
    from gcurun.runtime.torch import mpi_ops

    assert mpi_ops.rank() == 0 and mpi_ops.size() == 1 and mpi_ops.is_initialized()
    x = torch.ones(3, requires_grad=True)
    for cls, args in ((mpi_ops.HorovodAllreduce, (x, None, "a", hvd.Sum, 2.0, 1.0,
                                                   hvd.global_process_set)),
                      (mpi_ops.HorovodAllgather, (x, "g", hvd.global_process_set)),
                      (mpi_ops.HorovodBroadcast, (x, 0, "b", hvd.global_process_set)),
                      (mpi_ops.HorovodAlltoall, (x, None, "t", hvd.global_process_set)),
                      (mpi_ops.HorovodReducescatter, (x, "r", hvd.Sum, hvd.global_process_set,
                                                      1.0, 1.0))):
        assert issubclass(cls, torch.autograd.Function)
        out = cls.apply(*args)
        assert out.requires_grad, cls.__name__
    outs = mpi_ops.HorovodGroupedAllreduce.apply(None, "ga", hvd.Sum, 1.0, 1.0,
                                                 hvd.global_process_set, x, x)
    assert len(outs) == 2
    outs = mpi_ops.HorovodGroupedAllgather.apply("gg", hvd.global_process_set, x)
    outs = mpi_ops.HorovodGroupedReducescatter.apply("gr", hvd.Sum, hvd.global_process_set,
                                                     1.0, 1.0, x)
    assert len(outs) == 1


def test_the_sparse_handle_is_callable_and_synchronizable(alone: None) -> None:
    dense = torch.tensor([[0.0, 2.0], [3.0, 0.0]])
    handle = hvd.sparse_allreduce_async(dense.to_sparse(), name="s", op=hvd.Sum)
    assert isinstance(handle, int)
    assert torch.equal(handle().to_dense(), dense)
    again = hvd.sparse_allreduce_async(dense.to_sparse(), name="s", op=hvd.Sum)
    assert torch.equal(hvd.synchronize(again).to_dense(), dense)


def test_a_named_tensor_is_named_after_its_op_and_refused_twice(alone: None) -> None:
    first = hvd.allreduce_async(torch.ones(2), name="twice")
    with pytest.raises(ValueError, match="allreduce 'allreduce.twice'.*still pending"):
        hvd.allreduce_async(torch.ones(2), name="twice")
    other = hvd.allgather_async(torch.ones(2), name="twice")     # another op's name
    hvd.synchronize(first)
    hvd.synchronize(other)
    hvd.synchronize(hvd.allreduce_async(torch.ones(2), name="twice"))


def test_the_timeline_calls(alone: None, tmp_path) -> None:
    path = tmp_path / "t.json"
    hvd.start_timeline(str(path), mark_cycles=True)
    hvd.allreduce(torch.ones(2), name="traced")
    hvd.stop_timeline()
    assert "allreduce.traced" in path.read_text()
    with pytest.raises(ValueError, match="file_path"):
        hvd.start_timeline("")


def test_one_handle_table_serves_every_binding(alone: None) -> None:
    # A torch handle is a handle of the runtime's one table: the runtime's own poll and
    # synchronize take it (and give the torch result), and torch's take the runtime's.
    import gcurun.runtime as runtime

    handle = hvd.allreduce_async(torch.ones(3), op=hvd.Sum)
    wait_for("the allreduce to complete", lambda: runtime.poll(handle), timeout=30)
    assert torch.equal(runtime.synchronize(handle), torch.ones(3))
    numpy_handle = runtime.allreduce_async(np.ones(2), op=runtime.Sum)
    assert hvd.synchronize(numpy_handle).tolist() == [1.0, 1.0]


def test_the_op_builders_take_their_arguments_by_keyword(alone: None) -> None:
    from gcurun.runtime.frontend import build
    from gcurun.runtime.frontend.state import current_state

    state = current_state()
    assert state is not None
    with pytest.raises(TypeError):
        build.allreduce_op(state.engine, np.ones(2), hvd.Sum, 1.0, 1.0,  # type: ignore[misc]
                           "x", False)
    op = build.allreduce_op(state.engine, np.ones(2), op=hvd.Sum, name="x", inplace=True)
    assert (op.name, op.inplace) == ("x", True)
