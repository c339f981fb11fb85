"""A guard for a rank that an MPI launcher started: ``start_rank_guard()``, called by the
MPI shim just before it execs the rank.

mpirun's daemon (prted, orted) starts each rank as the leader of its own process group and
stops it with a signal; a rank's own children are stopped only when they stay in that
group and the daemon is alive to signal it. If the daemon dies (SIGKILL), its ranks and
their children would run on under PID 1. The guard is a small process, detached from the
rank (its own session, no inherited descriptors, so it holds no output pipe open), that
waits for the rank or the daemon to end and then stops whatever is left in the rank's
group: SIGTERM, a grace period, SIGKILL.

Standard library only, with pidfds (Linux 5.3+); without them it does nothing and the
launcher's own sweep is what is left.
"""

from __future__ import annotations

import os
import select
import signal
import time

GUARD_NAME = b"gcurun-rank-guard"
# Daemons that put every task of a node into the first task's process group: stopping
# that group when the first task ends would stop its siblings. Slurm's step daemon also
# tracks and stops every process of its step itself (proctrack), so such ranks need no
# guard.
SHARED_GROUP_STARTERS = frozenset({"slurmstepd"})
_PR_SET_NAME = 15
POLL_SECONDS = 0.05


def start_rank_guard(grace: float = 3.0) -> int | None:
    """Fork the guard of this process (the rank to be) and its parent (the MPI daemon);
    returns the guard's pid in the caller, or None when there is none (no pidfds, or this
    process does not lead its own process group, whose stop would reach the daemon)."""
    rank, parent = os.getpid(), os.getppid()
    if os.getpgid(0) != rank or parent <= 1 or _name_of(parent) in SHARED_GROUP_STARTERS:
        return None
    try:
        watched = [os.pidfd_open(rank), os.pidfd_open(parent)]
    except (AttributeError, OSError):
        return None
    ready_r, ready_w = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            guard = os.fork()
            if guard == 0:
                os.close(ready_r)
                _guard(rank, watched, ready_w, grace)
            os.write(ready_w, str(guard).encode())
        finally:
            os._exit(0)
    os.waitpid(middle, 0)         # the guard is reparented: the rank never waits for it
    os.close(ready_w)
    with os.fdopen(ready_r, "rb") as answer:
        pid = answer.read()
    for fd in watched:
        os.close(fd)
    return int(pid) if pid.isdigit() else None


def _guard(rank: int, watched: list[int], ready: int, grace: float) -> None:
    """The guard's life; it never returns. Closing ``ready`` (with every other inherited
    descriptor) tells the rank it is in place."""
    code = 0
    try:
        os.setsid()
        for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        keep = sorted(watched)
        low = 3
        for fd in keep:
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 65536)
        _name()
        select.select(watched, [], [])
        stop_group(rank, grace)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def stop_group(pgid: int, grace: float) -> None:
    """SIGTERM to group ``pgid``, up to ``grace`` seconds, SIGKILL to what is left."""
    if not _signal(pgid, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _signal(pgid, 0):
            return
        time.sleep(POLL_SECONDS)
    _signal(pgid, signal.SIGKILL)


def _signal(pgid: int, signum: int) -> bool:
    """Send ``signum`` to the group; False when the group is gone."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _name_of(pid: int) -> str:
    """The command name of process ``pid`` ('' when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as comm:
            return comm.read().strip()
    except OSError:
        return ""


def _name() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_NAME, GUARD_NAME, 0, 0, 0)
    except (OSError, AttributeError):
        pass
