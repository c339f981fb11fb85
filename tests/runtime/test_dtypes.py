"""How reductions scale and average each dtype: as Horovod does on a CPU."""

from __future__ import annotations

import numpy as np
import pytest

from gcurun.runtime.dtypes import average, scale, scale_into


def test_float16_scales_in_float32_math() -> None:
    # Horovod: half(float(x) * float(factor)). numpy alone rounds the factor to half
    # precision first, which changes some products (here 11 of 289).
    rng = np.random.default_rng(1234)
    x = rng.integers(-100, 100, 289).astype(np.float16)
    factor = 0.1915194503788923
    expected = (x.astype(np.float32) * np.float32(factor)).astype(np.float16)
    out = np.empty_like(x)
    scale_into(x, factor, out)
    assert np.array_equal(out, expected)
    naive = x.copy()
    np.multiply(naive, factor, out=naive, casting="unsafe")
    assert (naive != expected).sum() == 11          # what the half-precision factor costs
    scale(x, factor)
    assert np.array_equal(x, expected)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integers_scale_in_float64_and_truncate(dtype: type) -> None:
    x = np.array([-7, -1, 0, 1, 7, 10 ** 6 + 1], dtype)
    scale(x, 0.5)
    assert x.tolist() == [-3, 0, 0, 0, 3, 500000]


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_integer_averages_round_toward_zero(dtype: type) -> None:
    x = np.array([-7, -6, -5, -1, 0, 1, 5, 7], dtype)
    average(x, 3, 1.0)
    assert x.tolist() == [-2, -2, -1, 0, 0, 0, 1, 2]


def test_unsigned_and_float_averages() -> None:
    u = np.array([0, 5, 7], np.uint8)
    average(u, 2, 1.0)
    assert u.tolist() == [0, 2, 3]
    f = np.array([3.0, -1.0])
    average(f, 2, 4.0)
    assert f.tolist() == [6.0, -2.0]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("size", [2, 3, 4, 6, 7])
def test_float_averages_are_the_rounded_quotient(dtype: type, size: int) -> None:
    # What a reference computed as sum / size gets (Horovod's tests compare so).
    sums = np.random.default_rng(size).integers(-300, 300, 4096).astype(dtype)
    got = sums.copy()
    average(got, size, 1.0)
    assert np.array_equal(got, sums / dtype(size))


def test_an_average_with_a_postscale_takes_one_factor() -> None:
    # Horovod folds the average into the postscale factor: one rounding.
    x = np.array([142.0, -94.0], np.float32)
    average(x, 3, 0.5)
    assert np.array_equal(x, np.array([142.0, -94.0], np.float32) * np.float32(0.5 / 3))
