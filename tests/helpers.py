"""Shared helpers of the test suite: waiting for named events, finding survivors."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
RANKS = ROOT / "tests" / "ranks"


class Tally:
    """A rank script's checks: each passed check counts; a failed one names the rank."""

    def __init__(self, rank: int, size: int):
        self.rank, self.size = rank, size
        self.count = 0

    def ok(self, condition: bool, what: str) -> None:
        assert condition, f"rank {self.rank}/{self.size}: {what}"
        self.count += 1


def skip_without(module: str, install: str) -> None:
    """Skip the test unless ``module`` is installed, without importing it here: importing
    paddle sets OMP_NUM_THREADS in this process, which later tests' ranks would inherit."""
    import pytest

    if importlib.util.find_spec(module) is None:
        pytest.skip(f"needs {module} ({install})")


def wait_for(what: str, predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``predicate`` until true; fail the test naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def read_ranks(directory: Path, size: int) -> list[dict]:
    return [json.loads((directory / f"rank-{r}.json").read_text()) for r in range(size)]


def rank_reports(out: str) -> dict[int, dict]:
    """Rank -> the JSON object that rank printed, from gcurun's ``[rank] ...`` console
    output; lines that are not JSON objects are skipped."""
    found = {}
    for line in out.splitlines():
        prefix, _, rest = line.partition(" ")
        if rest.startswith("{"):
            found[int(prefix.strip("[]"))] = json.loads(rest)
    return found


def all_pids(records: list[dict]) -> list[int]:
    """The pids of the ranks of worker.py records and of the grandchildren they started."""
    return [r["pid"] for r in records] + [r["grandchild"] for r in records if r["grandchild"]]


def survivors(pids: list[int], timeout: float = 5.0) -> list[int]:
    """The pids that are still alive (not zombies) after giving them ``timeout`` to go."""
    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def gcurun_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gcurun", *args]


def run_gcurun(*args: str, timeout: float = 120.0, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **kw.pop("env", {})}
    return subprocess.run(gcurun_cmd(*args), capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=kw.pop("cwd", ROOT), **kw)
