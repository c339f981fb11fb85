"""The home of process-group signalling, and the guard that keeps a launcher program
(mpirun, srun) from outliving gcurun: ``python session_guard.py GRACE -- mpirun ...``.

Nothing here is MPI's own: every launcher uses the process-group helpers (the bootstrap,
its guard, the local and SSH groups, the supervisor's stopping), and the guard runs
srun as it runs mpirun (mpirun is named below as the example). It stays one module
because it runs by file path and so cannot import a sibling.

gcurun starts this guard as the leader of a new session and the guard starts mpirun in
it, so every local process of the job (mpirun, its daemons, the ranks and whatever they
start) carries that session id. When the guard is told to stop (SIGTERM, SIGINT, SIGHUP,
or SIGTERM from the kernel because gcurun died: PR_SET_PDEATHSIG), it passes SIGTERM to
mpirun, which stops the ranks on every host, and then stops every process group left in
the session: SIGTERM, ``GRACE`` seconds, SIGKILL. mpirun alone would leave the ranks' own
children behind, and it can miss ranks it was still launching.

The guard is also the job's subreaper (PR_SET_CHILD_SUBREAPER): a local process of the job
whose parent ends (a rank mpirun did not wait for, the ranks' own guards, which leave the
session, and whatever a rank left running) becomes its child. After mpirun exits, however
it ends, the guard sweeps the session and then waits for every such process to be gone
(SIGKILL for any left after ``GRACE`` seconds and the rank guards' own grace), so gcurun,
which waits for the guard, returns only when no local process of the job is left.

It exits with mpirun's status (re-raising the signal that killed mpirun). Standard library
only; run by file path. The home of process-group signalling: the bootstrap and the
launcher import :func:`signal_group` and :func:`death_signal_setter` from here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

_stopping: float | None = None     # monotonic time the stop was requested
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
# A rank's guard (:mod:`.rank_guard`) gives the rank's group this long between SIGTERM and
# SIGKILL; adopted processes are awaited that long (and a little more) beyond the grace.
RANK_GUARD_GRACE = 3.0
ADOPTED_SLACK = 2.0


def _on_stop(signum: int, _frame: object) -> None:
    global _stopping
    if _stopping is None:
        _stopping = time.monotonic()


def death_signal_setter(signum: int) -> Callable[[], None]:
    """A function that makes the process calling it get ``signum`` when its parent dies
    (Linux's PR_SET_PDEATHSIG; elsewhere it does nothing). prctl is looked up now, so
    the function is safe to call between fork and exec."""
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return lambda: None
    return lambda: prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux 3.4+); False elsewhere."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0,
                                                       0) == 0
    except (OSError, AttributeError):
        return False


def own_children() -> list[int]:
    """The pids of this process's live (not zombie) children."""
    me = os.getpid()
    return [pid for pid, fields in _processes() if int(fields[1]) == me and fields[0] != "Z"]


def _processes() -> Iterator[tuple[int, list[str]]]:
    """Every process's pid and the fields of its /proc/PID/stat after the command name
    (state, parent, process group, session, ...); those that end meanwhile are skipped."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                yield int(entry), fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue


def wait_adopted(deadline: float, kill_wait: float = ADOPTED_SLACK) -> None:
    """Reap every child left (mpirun is reaped already: all are adopted) until none is;
    at ``deadline`` SIGKILL those still alive, and give up ``kill_wait`` seconds later
    (a process stuck in the kernel)."""
    give_up = deadline + kill_wait
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        now = time.monotonic()
        if now >= give_up:
            return
        if now >= deadline:
            for pid in own_children():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    continue
        time.sleep(0.02)


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to a whole process group, ignoring one that is already gone."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def group_exists(pgid: int) -> bool:
    """True while any process, a zombie included, is left in group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def session_processes(sid: int) -> list[tuple[int, int]]:
    """(pid, process group) of every live process in session ``sid`` but this one."""
    found = []
    for pid, fields in _processes():
        state, pgrp, session = fields[0], int(fields[2]), int(fields[3])
        if pid != os.getpid() and session == sid and state != "Z":
            found.append((pid, pgrp))
    return found


def signal_session(sid: int, signum: int) -> bool:
    """Send ``signum`` to every process group in the session (and to the members of the
    guard's own group one by one). True when anything was still there."""
    procs = session_processes(sid)
    for pid, pgrp in procs:
        try:
            if pgrp == os.getpgrp():
                os.kill(pid, signum)
            else:
                signal_group(pgrp, signum)
        except OSError:
            continue
    return bool(procs)


def sweep(sid: int, deadline: float) -> None:
    signal_session(sid, signal.SIGTERM)
    while time.monotonic() < deadline:
        if not session_processes(sid):
            return
        time.sleep(0.05)
    signal_session(sid, signal.SIGKILL)


def run(grace: float, argv: list[str]) -> int:
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _on_stop)
    death_signal_setter(signal.SIGTERM)()   # not Linux: gcurun's terminate still stops it
    become_subreaper()
    if os.getppid() == 1:
        _on_stop(signal.SIGTERM, None)   # gcurun died before the guard was ready
    try:
        child = subprocess.Popen(argv)
    except OSError as exc:
        sys.stderr.write(f"gcurun: cannot run {argv[0]!r}: {exc.strerror or exc}\n")
        return 127 if isinstance(exc, FileNotFoundError) else 126
    forwarded = False
    while True:
        if _stopping is not None and not forwarded:
            child.send_signal(signal.SIGTERM)
            forwarded = True
        try:
            code = child.wait(timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            if _stopping is not None and time.monotonic() > _stopping + grace:
                signal_session(os.getsid(0), signal.SIGKILL)
    now = time.monotonic()
    deadline = max(_stopping + grace, now + 0.5) if _stopping is not None else now + grace
    sweep(os.getsid(0), deadline)
    wait_adopted(max(deadline, time.monotonic()) + RANK_GUARD_GRACE + ADOPTED_SLACK)
    return code


def main(args: list[str]) -> None:
    if len(args) < 3 or args[1] != "--":
        sys.stderr.write("usage: session_guard.py GRACE_SECONDS -- PROGRAM [ARG...]\n")
        sys.exit(2)
    code = run(float(args[0]), args[2:])
    if code < 0:
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main(sys.argv[1:])
