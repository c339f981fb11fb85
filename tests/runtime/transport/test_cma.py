"""Single-copy reads of many extents (``CrossMemory.read_parts``), from this process."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from gcurun.runtime.transport import cma
from gcurun.runtime.transport.cma import CrossMemory, Extent, address_of

pytestmark = pytest.mark.skipif(not CrossMemory().enabled,
                                reason="process_vm_readv is not available here")


def extents(buf: np.ndarray, pieces: int, rng: np.random.Generator) -> list[Extent]:
    """``buf`` cut into ``pieces`` extents of random lengths, some of them empty."""
    edges = sorted(int(e) for e in rng.integers(0, len(buf) + 1, pieces - 1))
    bounds = [0, *edges, len(buf)]
    base = address_of(buf)
    return [(base + a, b - a) for a, b in zip(bounds, bounds[1:], strict=False)]


@pytest.mark.parametrize(("nbytes", "local_pieces", "remote_pieces"), [
    (1, 1, 1), (1000, 1, 7), (1000, 9, 1), (65536, 3000, 2), (1 << 20, 2500, 3100),
])
def test_extents_cut_differently_on_each_side(nbytes: int, local_pieces: int,
                                              remote_pieces: int) -> None:
    rng = np.random.default_rng(nbytes + local_pieces)
    source = rng.integers(0, 256, nbytes, dtype=np.uint8)
    target = np.zeros(nbytes, np.uint8)
    CrossMemory().read_parts(os.getpid(), extents(target, local_pieces, rng),
                             extents(source, remote_pieces, rng))
    assert np.array_equal(target, source)


def test_reads_that_stop_short_carry_on_where_they_stopped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel may copy less than asked (a partial read): the rest follows."""
    real: Callable[..., int] = cma._READV
    calls = []

    def short(pid: int, local: Any, lcount: int, remote: Any, rcount: int, flags: int) -> int:
        calls.append(lcount)
        remote[0].length = min(remote[0].length, 777)     # at most 777 bytes a call
        return real(pid, local, lcount, remote, 1, flags)

    monkeypatch.setattr(cma, "_READV", short)
    rng = np.random.default_rng(1)
    source = rng.integers(0, 256, 20000, dtype=np.uint8)
    target = np.zeros_like(source)
    CrossMemory().read_parts(os.getpid(), extents(target, 40, rng), extents(source, 30, rng))
    assert np.array_equal(target, source) and len(calls) >= 20000 // 777
