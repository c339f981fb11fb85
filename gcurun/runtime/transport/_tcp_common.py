"""What the ``tcp`` transport's modules share: the large-message descriptor and the
sizes that choose a path."""

from __future__ import annotations

import struct

from gcurun.runtime.api import Buffer
from gcurun.runtime.transport.cma import address_of

DESCRIPTOR = struct.Struct("<QQ")          # address, bytes (address 0: a list follows)
MAX_EXTENTS = 1 << 16
CMA_MIN_BYTES = 64 << 10
FAST_READS = 200


def describe(bufs: list[Buffer]) -> bytes:
    """The descriptor of a large message: its one extent, or (0, count) and the extents."""
    if len(bufs) == 1:
        return DESCRIPTOR.pack(address_of(bufs[0]), bufs[0].nbytes)
    return DESCRIPTOR.pack(0, len(bufs)) + b"".join(
        DESCRIPTOR.pack(address_of(buf), buf.nbytes) for buf in bufs)
