"""Alltoall: p-1 rounds of pairwise exchange."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gcurun.runtime.algorithms.segments import Segment
from gcurun.runtime.api import Transport


def pairwise_alltoall(t: Transport, send: np.ndarray, send_segments: Sequence[Segment],
                      out: np.ndarray, recv_segments: Sequence[Segment]) -> None:
    """Rank r sends ``send_segments[j]`` of ``send`` to rank j and receives rank j's block
    into ``recv_segments[j]`` of ``out``: p-1 rounds of pairwise exchange."""
    p, r = t.size, t.rank
    offset, length = send_segments[r]
    recv_offset, _ = recv_segments[r]
    out[recv_offset:recv_offset + length] = send[offset:offset + length]
    for step in range(1, p):
        dest, source = (r + step) % p, (r - step) % p
        s_off, s_len = send_segments[dest]
        r_off, r_len = recv_segments[source]
        t.sendrecv(send[s_off:s_off + s_len], dest, out[r_off:r_off + r_len], source)
