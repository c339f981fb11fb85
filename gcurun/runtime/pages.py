"""Huge pages for the tensors the engine reduces where they lie.

A peer's single-copy read (:mod:`gcurun.runtime.cma`) pins every page it reads from; on
the 4 KiB pages a program's allocator hands out for tensors of a few MiB that costs about
as much again as the copy itself. The first time the engine meets a large buffer it asks
the kernel to collapse the 2 MiB regions under it into transparent huge pages
(``MADV_COLLAPSE``, Linux 6.1): the bytes stay where they are, only their backing
changes, once, and every later step reads them at the huge-page rate. A region the
kernel refuses (it crosses into another mapping, or the kernel is older) stays as it was.
``GCURUN_HUGE_PAGES=0`` turns this off.
"""

from __future__ import annotations

import ctypes
import sys
from collections import OrderedDict
from typing import Any

import numpy as np

HUGE_PAGE = 2 << 20
MADV_COLLAPSE = 25
MIN_BYTES = 1 << 20             # smaller tensors travel in the fusion buffer, on huge pages
REMEMBERED = 4096               # buffers already collapsed (a model's gradients, and more)


def _load() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_MADVISE = _load()


class HugePages:
    """Collapses the memory under large buffers into huge pages, once per buffer."""

    def __init__(self, enabled: bool = True, min_bytes: int = MIN_BYTES):
        self.enabled = enabled and _MADVISE is not None
        self.min_bytes = min_bytes
        self.collapsed = 0          # 2 MiB regions the kernel collapsed for us
        self._seen: OrderedDict[tuple[int, int], None] = OrderedDict()

    def prepare(self, arr: np.ndarray) -> None:
        """Collapse the regions under ``arr`` unless this buffer was seen before."""
        if not self.enabled or arr.nbytes < self.min_bytes:
            return
        address = arr.__array_interface__["data"][0]
        key = (address, arr.nbytes)
        if key in self._seen:
            self._seen.move_to_end(key)
            return
        self._seen[key] = None
        if len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)
        first = address - address % HUGE_PAGE
        end = address + arr.nbytes
        refused = 0
        for region in range(first, end, HUGE_PAGE):
            # One region a call: one that crosses into another mapping fails alone.
            if _MADVISE(region, HUGE_PAGE, MADV_COLLAPSE) == 0:
                self.collapsed += 1
            else:
                refused += 1
        if refused and not self.collapsed:
            self.enabled = False    # the kernel cannot do it (too old, or THP off)
