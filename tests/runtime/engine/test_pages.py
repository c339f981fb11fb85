"""Huge pages under the tensors the engine reduces where they lie."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from gcurun.runtime.engine.pages import HUGE_PAGE, RECHECK_EVERY, HugePages

REGIONS = 3                     # whole 2 MiB regions inside an 8 MiB buffer at any offset


def small_page_buffer(nbytes: int, advice: int | None = None) -> np.ndarray:
    """Anonymous memory at an odd offset from a 2 MiB boundary, like a tensor from a
    program's allocator, touched after ``advice`` (if any) was given to its mapping."""
    region = mmap.mmap(-1, nbytes + 2 * HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if advice is not None:
        region.madvise(advice)
    raw = np.frombuffer(region, np.uint8)
    start = -raw.__array_interface__["data"][0] % HUGE_PAGE + 4096 + 16
    arr = raw[start:start + nbytes].view(np.float32)
    arr[...] = np.arange(len(arr), dtype=np.float32)
    return arr


def mapping_of(arr: np.ndarray) -> tuple[int, list[str]]:
    """(AnonHugePages in KiB, VmFlags) of the mapping that holds ``arr``."""
    address = arr.__array_interface__["data"][0]
    inside, huge = False, None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                low, high = (int(x, 16) for x in head.split("-"))
                inside = low <= address < high
            elif inside and head == "AnonHugePages:":
                huge = int(line.split()[1])
            elif inside and head == "VmFlags:":
                assert huge is not None
                return huge, line.split()[1:]
    raise AssertionError("no mapping holds the buffer")


@pytest.fixture
def pages() -> HugePages:
    found = HugePages()
    if not found.enabled:
        pytest.skip("this kernel cannot collapse memory into huge pages (MADV_COLLAPSE)")
    return found


def test_a_large_buffer_is_collapsed_and_keeps_its_bytes(pages: HugePages) -> None:
    arr = small_page_buffer(8 << 20)
    if mapping_of(arr)[0] >= REGIONS * 2048:
        pytest.skip("fresh memory is on huge pages already here (huge pages 'always')")
    pages.prepare(arr)
    assert pages.collapsed >= REGIONS
    assert mapping_of(arr)[0] >= REGIONS * 2048
    assert np.array_equal(arr, np.arange(len(arr), dtype=np.float32))


def test_a_buffer_seen_lately_is_not_collapsed_again_until_its_recheck(
        pages: HugePages) -> None:
    arr = small_page_buffer(8 << 20)
    pages.prepare(arr)
    first = pages.collapsed
    assert first >= REGIONS
    for _ in range(RECHECK_EVERY):
        pages.prepare(arr)
    assert pages.collapsed == first
    pages.prepare(arr)                     # the address may hold new memory by now
    assert pages.collapsed == 2 * first


def test_memory_advised_against_huge_pages_is_left_as_it_is(pages: HugePages) -> None:
    arr = small_page_buffer(8 << 20, advice=mmap.MADV_NOHUGEPAGE)
    pages.prepare(arr)
    huge, flags = mapping_of(arr)
    assert pages.collapsed == 0 and huge == 0 and "nh" in flags and "hg" not in flags


def test_small_buffers_and_a_disabled_collapser_leave_memory_alone() -> None:
    arr = small_page_buffer(8 << 20)
    before = mapping_of(arr)
    off = HugePages(enabled=False)
    off.prepare(arr)
    small = HugePages(min_bytes=16 << 20)
    small.prepare(arr)
    assert off.collapsed == small.collapsed == 0 and mapping_of(arr) == before
