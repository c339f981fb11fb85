"""The guard of a bootstrap (:mod:`gcurun.launch.remote.bootstrap`, point 5 of its
docstring): a process forked before the first rank starts that learns each rank's
process group and, if the bootstrap dies without saying it is done (SIGKILL), stops
those groups, so not even the ranks' own children outlive it.

Stdlib only (with gcurun's stdlib-only modules): it runs on the ranks' hosts.
"""

from __future__ import annotations

import os
import signal
import time

from gcurun.launch.remote.session_guard import group_exists, signal_group

POLL_SECONDS = 0.05
GUARD_NAME = b"gcurun-guard"
_PR_SET_NAME = 15


class Guard:
    """The bootstrap's end of its guard process (see the module's docstring, point 5).

    The guard reads one line per event from a pipe: ``PGID`` (a rank's group started),
    ``-PGID`` (that group is gone), ``done`` (the bootstrap stopped everything itself).
    The end of the pipe without ``done`` means the bootstrap died: SIGTERM to every group
    it knows, ``grace`` seconds, SIGKILL.
    """

    def __init__(self, grace: float) -> None:
        read_fd, self.fd = os.pipe()
        try:
            self.pid = os.fork()
        except OSError:
            os.close(read_fd)
            os.close(self.fd)
            raise
        if self.pid == 0:   # the guard
            code = 0
            try:
                os.close(self.fd)
                become_guard(read_fd)
                guard_groups(read_fd, grace)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(read_fd)

    def tell(self, line: str) -> None:
        try:
            os.write(self.fd, line.encode() + b"\n")
        except OSError:
            pass   # the guard is gone; the bootstrap goes on without it

    def done(self) -> None:
        self.tell("done")
        os.close(self.fd)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def become_guard(keep: int) -> None:
    """Leave the bootstrap's session and every descriptor but ``keep``: the guard must
    not hold the launcher's channel open, nor get the signals meant for the bootstrap."""
    os.setsid()
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    signal.set_wakeup_fd(-1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, keep)
    os.closerange(keep + 1, 65536)
    try:
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_NAME, GUARD_NAME, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def guard_groups(fd: int, grace: float) -> None:
    """The guard's loop: track the groups named on ``fd``; stop them if it ends early."""
    groups: set[int] = set()
    pending = b""
    while True:
        data = os.read(fd, 4096)
        if not data:
            break
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            if line == b"done":
                return
            if line.startswith(b"-"):
                groups.discard(int(line[1:]))
            elif line:
                groups.add(int(line))
    for group in groups:
        signal_group(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(group_exists(g) for g in groups):
        time.sleep(POLL_SECONDS)
    for group in groups:
        signal_group(group, signal.SIGKILL)
