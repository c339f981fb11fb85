"""Stopping process groups: SIGTERM, a deadline on a monotonic clock, SIGKILL, reaping.

Shared by every executor that owns local processes (local ranks, mpirun). Signalling a
group is :func:`gcurun.launch.remote.session_guard.signal_group`, shared with the remote
programs.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from gcurun.launch.remote.session_guard import group_exists, signal_group

if TYPE_CHECKING:
    import psutil


def descendants(pid: int) -> list[psutil.Process]:
    """Every live process started under ``pid``, grandchildren included."""
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def stop_processes(pids: Sequence[int], grace_seconds: float) -> None:
    """Stop the processes ``pids`` and everything they started.

    Each pid leads its own session, so its group holds its descendants; descendants that
    left the group (a new session) are found through psutil beforehand. Every group gets
    SIGTERM; whatever still lives at the deadline gets SIGKILL. Reaping is the owner's job.
    """
    if not any(group_exists(pid) for pid in pids):
        return  # the common end of a job: nothing left, and no need to load psutil
    strays = [d for pid in pids for d in descendants(pid)]
    for pid in pids:
        signal_group(pid, signal.SIGTERM)
    for s in strays:
        _signal(s, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        if not live_groups(pids) and not any(_alive(s) for s in strays):
            return
        time.sleep(0.05)
    for pid in pids:
        signal_group(pid, signal.SIGKILL)
    for s in strays:
        _signal(s, signal.SIGKILL)


def live_groups(pgids: Iterable[int]) -> set[int]:
    """The groups among ``pgids`` that still hold a process that is not a zombie."""
    import psutil

    wanted, live = set(pgids), set()
    for proc in psutil.process_iter(["pid", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            group = os.getpgid(proc.info["pid"])
        except (ProcessLookupError, PermissionError):
            continue
        if group in wanted:
            live.add(group)
    return live


def _signal(p: psutil.Process, signum: int) -> None:
    import psutil

    try:
        p.send_signal(signum)
    except psutil.Error:
        pass


def _alive(p: psutil.Process) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
