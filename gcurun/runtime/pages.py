"""Huge pages for the tensors the engine reduces where they lie.

A peer's single-copy read (:mod:`gcurun.runtime.cma`) pins every page it reads from; on
the 4 KiB pages a program's allocator hands out for tensors of a few MiB that costs about
as much again as the copy itself. The first time the engine meets a large buffer it asks
the kernel to collapse the 2 MiB regions under it into transparent huge pages
(``MADV_COLLAPSE``, Linux 6.1): the bytes stay where they are, only their backing
changes, once, and every later step reads them at the huge-page rate. A region the
kernel refuses (it holds no mapping, or the kernel is older) stays as it was.
``GCURUN_HUGE_PAGES=0`` turns this off.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from collections import OrderedDict
from typing import Any

import numpy as np

HUGE_PAGE = 2 << 20
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
MIN_BYTES = 1 << 20             # a smaller tensor is a small part of the regions under it
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
        self.enabled = enabled and _can_collapse()
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
        for region in range(first, address + arr.nbytes, HUGE_PAGE):
            # One region a call, so that one the kernel refuses fails alone. A region
            # across two mappings (a tensor's allocation and its neighbour's, one advised
            # for huge pages and one not) is refused until both parts are advised alike.
            if _MADVISE(region, HUGE_PAGE, MADV_COLLAPSE) == 0 or (
                    _MADVISE(region, HUGE_PAGE, MADV_HUGEPAGE) == 0
                    and _MADVISE(region, HUGE_PAGE, MADV_COLLAPSE) == 0):
                self.collapsed += 1


_CAN_COLLAPSE: bool | None = None


def _can_collapse() -> bool:
    """Whether this kernel collapses memory on request: tried once on a region of our own
    (an older kernel, or huge pages turned off, refuses)."""
    global _CAN_COLLAPSE
    if _CAN_COLLAPSE is None:
        _CAN_COLLAPSE = False
        if _MADVISE is not None:
            region = mmap.mmap(-1, 2 * HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            raw = np.frombuffer(region, np.uint8)
            start = -raw.__array_interface__["data"][0] % HUGE_PAGE
            raw[start:start + HUGE_PAGE] = 1
            _CAN_COLLAPSE = _MADVISE(raw[start:].__array_interface__["data"][0], HUGE_PAGE,
                                     MADV_COLLAPSE) == 0
            del raw
            region.close()
    return _CAN_COLLAPSE
