"""float16 reductions and scaling through torch give numpy's bits, and run only where
torch is already loaded."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator

import numpy as np
import pytest

from gcurun.runtime import halfmath
from gcurun.runtime.api import ReduceOp
from gcurun.runtime.dtypes import average, combine, scale_into

torch = pytest.importorskip("torch")

SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504.0, -65504.0,
                    6e-8, -6e-8, 6.1e-5, 1.0, -1.0, 2048.0, 0.1], np.float16)


def _halves(seed: int, count: int) -> np.ndarray:
    """Every float16 bit pattern is as likely (normals, subnormals, infinities, NaNs
    with all payloads), with the special values at the start."""
    bits = np.random.default_rng(seed).integers(0, 1 << 16, count, dtype=np.uint16)
    bits[:len(SPECIAL)] = SPECIAL.view(np.uint16)
    return bits.view(np.float16)


def _pairs(count: int = 70_001) -> tuple[np.ndarray, np.ndarray]:
    """Two operand arrays; every special value meets every other one at the start,
    NaNs with different bits meet later on. An odd count leaves a vector tail."""
    a, b = _halves(1, count), _halves(2, count)
    grid = np.array(np.meshgrid(SPECIAL, SPECIAL)).reshape(2, -1)
    a[:grid.shape[1]], b[:grid.shape[1]] = grid
    return a, b


def _bits(arr: np.ndarray) -> np.ndarray:
    return arr.view(np.uint16)


@pytest.fixture
def numpy_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As in a process that never imported torch."""
    monkeypatch.setitem(sys.modules, "torch", None)
    yield


def _reference(fn, *args):    # type: ignore[no-untyped-def]
    """``fn(*args)`` computed by numpy alone."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "torch", None)
        return fn(*args)


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with np.errstate(all="ignore"):
        yield


@pytest.mark.parametrize("rop", [ReduceOp.SUM, ReduceOp.AVERAGE, ReduceOp.PRODUCT])
def test_sum_and_product_through_torch_are_numpys_bits(rop: ReduceOp) -> None:
    a, b = _pairs()
    fast = combine(rop, np.dtype(np.float16))
    assert isinstance(fast, halfmath.HalfCombine)
    ufunc = {ReduceOp.PRODUCT: np.multiply}.get(rop, np.add)
    expected = ufunc(a, b)
    assert np.array_equal(_bits(fast(a, b)), _bits(expected))
    out = np.empty_like(a)
    assert fast(a, b, out) is out and np.array_equal(_bits(out), _bits(expected))
    acc = a.copy()                               # in place, as the ring accumulates
    fast(acc, b, out=acc)
    assert np.array_equal(_bits(acc), _bits(expected))
    # Unaligned views, as a fused buffer's pieces are.
    got = fast(a[3:-2], b[1:-4])
    assert np.array_equal(_bits(got), _bits(ufunc(a[3:-2], b[1:-4])))


def test_the_data_catches_a_kernel_that_differs_in_any_bit() -> None:
    # The operands swapped in torch's multiply change which NaN survives; torch's
    # minimum and maximum differ on signed zeros and NaNs (why they stay with numpy).
    a, b = _pairs()
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    assert not np.array_equal(_bits(torch.mul(ta, tb).numpy()), _bits(np.multiply(a, b)))
    assert not np.array_equal(_bits(torch.add(tb, ta).numpy()), _bits(np.add(a, b)))
    assert not np.array_equal(_bits(torch.minimum(ta, tb).numpy()), _bits(np.minimum(a, b)))
    assert not np.array_equal(_bits(torch.maximum(ta, tb).numpy()), _bits(np.maximum(a, b)))
    half_factor = a * np.float16(0.1)            # the factor rounded to float16 first
    out = np.empty_like(a)
    scale_into(a, 0.1, out)
    assert not np.array_equal(_bits(half_factor), _bits(out))


def test_min_and_max_stay_numpys_ufuncs() -> None:
    half = np.dtype(np.float16)
    assert combine(ReduceOp.MIN, half) is np.minimum
    assert combine(ReduceOp.MAX, half) is np.maximum
    assert combine(ReduceOp.SUM, np.dtype(np.float32)) is np.add


@pytest.mark.parametrize("factor", [0.5, 1 / 3, 0.1, 3.7, 1e-5, 70000.0, -2.5])
def test_scaling_through_torch_is_numpys_float32_math(factor: float) -> None:
    a, _ = _pairs()
    expected = _reference(lambda: _scaled(a, factor))
    assert np.array_equal(_bits(_scaled(a, factor)), _bits(expected))
    assert np.array_equal(_bits(expected),
                          _bits((a.astype(np.float32) * np.float32(factor)).astype(np.float16)))


def _scaled(a: np.ndarray, factor: float) -> np.ndarray:
    out = np.empty_like(a)
    scale_into(a, factor, out)
    return out


@pytest.mark.parametrize("size, postscale", [(2, 1.0), (3, 1.0), (7, 1.0), (1000, 1.0),
                                             (3, 0.7), (4, 2.0)])
def test_averages_through_torch_are_numpys(size: int, postscale: float) -> None:
    a, _ = _pairs()

    def averaged() -> np.ndarray:
        got = a.copy()
        average(got, size, postscale)
        return got

    expected = _reference(averaged)
    assert np.array_equal(_bits(averaged()), _bits(expected))
    if postscale == 1.0:
        assert np.array_equal(_bits(expected), _bits(a / np.float16(size)))


def test_torch_runs_when_loaded_and_numpy_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    class Spy:
        """torch, counting the kernels called."""

        def __getattr__(self, name: str):    # type: ignore[no-untyped-def]
            if name in ("add", "mul", "div"):
                calls.append(name)
            return getattr(torch, name)

    a, b = _pairs()
    fast = combine(ReduceOp.SUM, np.dtype(np.float16))
    monkeypatch.setitem(sys.modules, "torch", Spy())
    fast(a, b)
    scale_into(a, 0.3, np.empty_like(a))
    average(a.copy(), 3, 1.0)
    fast(a[:10], b[:10])                         # too small to be worth torch's call
    assert calls == ["add", "mul", "div"]
    monkeypatch.setitem(sys.modules, "torch", None)
    fast(a, b)
    assert calls == ["add", "mul", "div"]


def test_read_only_memory_goes_to_numpy_without_a_warning() -> None:
    a, b = _pairs()
    b.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = combine(ReduceOp.SUM, np.dtype(np.float16))(a, b)
    assert np.array_equal(_bits(got), _bits(np.add(a, b)))


def test_numpy_only_never_imports_torch(numpy_only: None) -> None:
    a, b = _pairs(5000)
    got = combine(ReduceOp.SUM, np.dtype(np.float16))(a, b)
    assert np.array_equal(_bits(got), _bits(np.add(a, b)))
    assert sys.modules["torch"] is None
