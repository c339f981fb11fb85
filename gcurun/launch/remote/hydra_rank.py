"""How the MPI shim runs a rank under Hydra (MPICH, Intel MPI): ``run_hydra_rank()``.

Hydra differs from Open MPI's mpirun in three ways that matter to gcurun:

* its proxy starts every rank in the proxy's own process group, where no guard could
  stop what the rank started without stopping the proxy: the shim gives the rank a
  process group of its own first;
* ``-prepend-rank`` tags chunks, not lines: the rank's output passes a line joiner
  (:mod:`.line_joiner`);
* a rank that exits with a non-zero code before or without MPI does not end the job:
  mpiexec waits for every other rank. So the shim does not exec the command here but
  runs it as its child, passes on the signals it gets, and when the command fails writes
  one marker line (:data:`EXIT_MARKER`, ``<rank> <code>`` or ``<rank> signal <n>``) on
  stderr before it ends the same way. The launcher reads the marker from the rank's
  output, stops the job at once and names that rank as the root cause
  (:func:`parse_exit_marker`).

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

from gcurun.launch.remote.line_joiner import start_line_joiner
from gcurun.launch.remote.rank_guard import start_rank_guard

EXIT_MARKER = "gcurun-rank-exit:"
_MARKER = re.compile(rb"^gcurun-rank-exit: (\d+) (?:(-?\d+)|signal (\d+))\s*$")
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
              signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT)


def parse_exit_marker(line: bytes) -> tuple[int, int | None, int | None] | None:
    """(rank, exit code, signal) from a marker line (exactly one of the last two set),
    or None for any other line."""
    match = _MARKER.match(line)
    if match is None:
        return None
    code, sig = match.group(2), match.group(3)
    return int(match.group(1)), int(code) if code else None, int(sig) if sig else None


def run_hydra_rank(rank: int, start: Callable[[], None]) -> NoReturn:
    """Run the rank (``start`` execs the command) under Hydra: its own process group,
    whole output lines, the guard, then the command as a child whose failure is
    reported with the marker. Ends this process as the command ended."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    start_line_joiner()
    start_rank_guard()   # the rank's group is stopped even if the MPI proxy is killed
    child = os.fork()
    if child == 0:
        for signum in _FORWARDED:
            signal.signal(signum, signal.SIG_DFL)
        start()
        os._exit(127)
    for signum in _FORWARDED:
        signal.signal(signum, lambda n, _frame: _pass_on(child, n))
    status = _wait(child)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        how = f"signal {-code}" if code < 0 else str(code)
        sys.stderr.write(f"{EXIT_MARKER} {rank} {how}\n")
        sys.stderr.flush()
    if code < 0:
        with contextlib.suppress(OSError, ValueError):   # SIGKILL and SIGSTOP have none
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF if code >= 0 else 128 - code)


def _pass_on(child: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(child, signum)


def _wait(child: int) -> int:
    while True:
        try:
            return os.waitpid(child, 0)[1]
        except InterruptedError:
            continue
