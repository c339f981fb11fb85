"""Huge pages for the tensors the engine reduces where they lie.

A peer's single-copy read (:mod:`gcurun.runtime.transport.cma`) pins every page it reads from; on
the 4 KiB pages a program's allocator hands out for tensors of a few MiB that costs about
as much again as the copy itself. When the engine meets a large buffer it asks the kernel
to collapse the 2 MiB regions under it into transparent huge pages (``MADV_COLLAPSE``,
Linux 6.1): the addresses stay, the kernel copies the bytes onto huge pages, and every
later step reads them at the huge-page rate. No mapping's advice is changed: the kernel
refuses regions of memory a program advised against huge pages, and regions that cross
into another mapping; those stay as they were. A region at either end of a tensor is
shared with its neighbour, whose untouched pages then become resident too: at most
2 MiB more at each end. ``GCURUN_HUGE_PAGES=0`` turns this off.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import sys
from collections import OrderedDict
from typing import Any

import numpy as np

from gcurun.runtime.dtypes import HUGE_PAGE

MADV_COLLAPSE = 25
MIN_BYTES = 1 << 20             # a smaller tensor is a small part of the regions under it
REMEMBERED = 4096               # buffers seen (a model's gradients, and more)
# A buffer seen before is collapsed again every this many times: an allocator may have
# handed its address to new memory since (on fresh 4 KiB pages). Collapsing memory that
# is already on huge pages costs a few microseconds per 2 MiB.
RECHECK_EVERY = 64


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
    """Collapses the memory under large buffers into huge pages."""

    def __init__(self, enabled: bool = True, min_bytes: int = MIN_BYTES):
        self.enabled = enabled and _can_collapse()
        self.min_bytes = min_bytes
        self.collapsed = 0          # 2 MiB regions the kernel accepted to collapse
        self._seen: OrderedDict[tuple[int, int], int] = OrderedDict()   # -> uses left

    def prepare(self, arr: np.ndarray) -> None:
        """Collapse the regions under ``arr``, unless this buffer was collapsed lately."""
        if not self.enabled or arr.nbytes < self.min_bytes:
            return
        address = arr.__array_interface__["data"][0]
        key = (address, arr.nbytes)
        left = self._seen.get(key)
        if left:
            self._seen[key] = left - 1
            self._seen.move_to_end(key)
            return
        self._seen[key] = RECHECK_EVERY
        self._seen.move_to_end(key)
        if len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)
        first = address - address % HUGE_PAGE
        for region in range(first, address + arr.nbytes, HUGE_PAGE):
            # One region a call, so that one the kernel refuses fails alone.
            if _MADVISE(region, HUGE_PAGE, MADV_COLLAPSE) == 0:
                self.collapsed += 1


_CAN_COLLAPSE: bool | None = None


def _can_collapse() -> bool:
    """Whether this kernel collapses memory on request, tried on a region of our own. An
    older kernel, or huge pages turned off, refuses for good; a refusal for want of
    memory at that moment is tried again by the next collapser."""
    global _CAN_COLLAPSE
    if _CAN_COLLAPSE is None and _MADVISE is not None:
        region = mmap.mmap(-1, 2 * HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        raw = np.frombuffer(region, np.uint8)
        start = -raw.__array_interface__["data"][0] % HUGE_PAGE
        raw[start:start + HUGE_PAGE] = 1
        done = _MADVISE(raw.__array_interface__["data"][0] + start, HUGE_PAGE,
                        MADV_COLLAPSE) == 0
        failure = ctypes.get_errno()
        del raw
        region.close()
        if done or failure not in (errno.EAGAIN, errno.ENOMEM):
            _CAN_COLLAPSE = done
        return done
    return bool(_CAN_COLLAPSE)
