"""Whole lines for Hydra: ``start_line_joiner()``, called by the MPI shim before it execs
the rank under MPICH or Intel MPI.

Hydra's ``-prepend-rank`` tags every chunk a rank writes, not every line, and mpiexec
writes the chunks of different ranks as they come: a rank that writes a line in pieces
(Python with PYTHONUNBUFFERED, a traceback's carets) gives lines such as
``[1] rank[1]  [1] 1``, and two ranks' pieces can share one line. The joiner is a small
process between the rank and its MPI proxy: the rank's stdout and stderr become pipes to
it, and it passes on only whole lines, all it has of them in one write, so each chunk
Hydra tags is whole lines of one rank. A last line without a newline goes out at the end.

It is not the rank's child (the rank never waits for it, as a shell's ``wait`` would) but
stays in the rank's process group and session, where the rank's guard and the launcher's
sweep find it; it ignores the signals that stop a job and ends when the rank and
everything that inherited its output have closed the pipes, so nothing the rank wrote is
lost. A line longer than ``MAX_LINE`` goes out in pieces. Standard library only.
"""

from __future__ import annotations

import os
import select
import signal

_CHUNK = 65536
MAX_LINE = 1 << 20


def start_line_joiner() -> None:
    """Make this process's stdout and stderr pipes to a joiner that passes their whole
    lines on to what they were. Returns once the joiner is in place."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            if os.fork() == 0:
                os.close(out_w)
                os.close(err_w)
                _join({out_r: 1, err_r: 2})
        finally:
            os._exit(0)
    os.waitpid(middle, 0)
    os.close(out_r)
    os.close(err_r)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.close(out_w)
    os.close(err_w)


def _join(sources: dict[int, int]) -> None:
    """The joiner's life: copy whole lines from each source pipe to its target until
    every pipe is closed; never returns."""
    try:
        for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(signum, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        keep = {0, 1, 2, *sources}
        for fd in range(3, 1024):
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        pending = {fd: b"" for fd in sources}
        while pending:
            ready, _, _ = select.select(list(pending), [], [])
            for fd in ready:
                data = os.read(fd, _CHUNK)
                if not data:
                    _write(sources[fd], pending.pop(fd))
                    continue
                text = pending[fd] + data
                cut = len(text) if len(text) > MAX_LINE else text.rfind(b"\n") + 1
                _write(sources[fd], text[:cut])
                pending[fd] = text[cut:]
    finally:
        os._exit(0)


def _write(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data):]
        except OSError:
            return
