"""How a buffer is cut between ranks: even counts, segments, the halves of a ring of two."""

from __future__ import annotations

from collections.abc import Sequence

Segment = tuple[int, int]   # (offset, length) in elements


def even_counts(total: int, parts: int) -> list[int]:
    """Split ``total`` into ``parts`` counts differing by at most one, larger ones first."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def to_segments(counts: Sequence[int]) -> list[Segment]:
    segments, offset = [], 0
    for count in counts:
        segments.append((offset, count))
        offset += count
    return segments


def pair_halves(count: int, rank: int) -> tuple[slice, slice, int]:
    """The ring of two ranks over ``count`` elements: (the half ``rank`` reduces, the half
    its peer reduces, the length of the first). Rank 0 takes the first, larger half, as
    :func:`even_counts` would."""
    half = (count + 1) // 2
    if rank == 0:
        return slice(0, half), slice(half, None), half
    return slice(half, None), slice(0, half), count - half
