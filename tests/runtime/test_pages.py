"""Huge pages under the tensors the engine reduces where they lie."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from gcurun.runtime.pages import HUGE_PAGE, HugePages


def small_page_buffer(nbytes: int) -> np.ndarray:
    """Anonymous memory touched on 4 KiB pages (no huge-page advice), at an odd offset
    from a 2 MiB boundary like a tensor from a program's allocator."""
    region = mmap.mmap(-1, nbytes + 2 * HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = np.frombuffer(region, np.uint8)
    start = -raw.__array_interface__["data"][0] % HUGE_PAGE + 4096 + 16
    arr = raw[start:start + nbytes].view(np.float32)
    arr[...] = np.arange(len(arr), dtype=np.float32)
    return arr


def huge_kib(arr: np.ndarray) -> int:
    """AnonHugePages of the mapping that holds ``arr``, from /proc/self/smaps."""
    address = arr.__array_interface__["data"][0]
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                low, high = (int(x, 16) for x in head.split("-"))
                inside = low <= address < high
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    raise AssertionError("no mapping holds the buffer")


def test_a_large_buffer_is_collapsed_once_and_keeps_its_bytes() -> None:
    arr = small_page_buffer(8 << 20)
    pages = HugePages()
    if not pages.enabled:
        pytest.skip("this kernel cannot collapse memory into huge pages (MADV_COLLAPSE)")
    before = huge_kib(arr)
    pages.prepare(arr)
    assert pages.collapsed >= 3            # 8 MiB spans at least three whole 2 MiB regions
    assert huge_kib(arr) >= before + 3 * 2048
    assert np.array_equal(arr, np.arange(len(arr), dtype=np.float32))
    collapsed = pages.collapsed
    pages.prepare(arr)                     # seen before: nothing asked of the kernel
    assert pages.collapsed == collapsed


def test_small_buffers_and_a_disabled_collapser_leave_memory_alone() -> None:
    arr = small_page_buffer(8 << 20)
    before = huge_kib(arr)
    off = HugePages(enabled=False)
    off.prepare(arr)
    assert off.collapsed == 0
    small = HugePages(min_bytes=16 << 20)
    small.prepare(arr)
    assert small.collapsed == 0 and huge_kib(arr) == before
