"""Several (input, output) pairs of one dtype seen as one buffer: what a fused batch of
allreduces (or a single tensor) is to the reduction routine."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import numpy as np

Part = tuple[np.ndarray, np.ndarray]          # (input view, output view), equal lengths
Finish = Callable[[np.ndarray], None]         # averaging or scaling, applied in place


class Pieces:
    """Several (input, output) pairs of one dtype, seen as one buffer of their
    concatenation. An output may be its own input (in place)."""

    __slots__ = ("pairs", "starts", "total")

    def __init__(self, pairs: Sequence[Part]):
        self.pairs = [(src, out) for src, out in pairs if len(src)]
        starts, total = [], 0
        for src, _ in self.pairs:
            starts.append(total)
            total += len(src)
        self.starts = starts
        self.total = total

    def parts(self, offset: int, length: int) -> list[Part]:
        """The views covering elements [offset, offset + length), cut at piece
        boundaries."""
        parts: list[Part] = []
        stop = offset + length
        index = max(bisect.bisect_right(self.starts, offset) - 1, 0)
        while index < len(self.pairs) and self.starts[index] < stop:
            src, out = self.pairs[index]
            start = self.starts[index]
            lo, hi = max(offset - start, 0), min(stop - start, len(src))
            if hi > lo:
                parts.append((src[lo:hi], out[lo:hi]))
            index += 1
        return parts
