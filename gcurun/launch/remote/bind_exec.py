"""Pin this process to a CPU set, then become the rank's command.

The fallback for hosts without numactl, run by file path so it needs neither gcurun on
``sys.path`` nor anything beyond the standard library::

    python bind_exec.py --cpus 0,1,2,3 -- python train.py

The affinity is set before ``exec``, so every thread the command starts inherits it.
Memory placement is left to the kernel's first-touch policy (numactl does --membind).
The home of exec'ing a rank's command: the MPI shim imports :func:`exec_command` from here.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Sequence


def restore_signals() -> None:
    """Undo what Python set up before exec: it ignores SIGPIPE and SIGXFSZ, and exec keeps
    ignored signals ignored, which would break pipelines like ``yes | head``."""
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)


def exec_command(argv: list[str], who: str = "gcurun") -> None:
    """Become ``argv`` with default signal dispositions; on failure, exit 127 (no such
    program) or 126 (cannot run it) with a message that starts with ``who``."""
    restore_signals()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"{who}: cannot run {argv[0]!r}: {exc.strerror}\n")
        sys.exit(127 if isinstance(exc, FileNotFoundError) else 126)


def exec_bound(cpus: set[int], argv: list[str]) -> None:
    """sched_setaffinity to ``cpus``, then exec ``argv``; returns only by exiting."""
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as exc:
        sys.stderr.write(f"gcurun: cannot bind to CPUs {sorted(cpus)}: {exc.strerror}; "
                         "they must be online and allowed to this process\n")
        sys.exit(126)
    exec_command(argv)


def numactl_argv(numactl: str, cpus: str, mem_node: int | None,
                 argv: Sequence[str]) -> list[str]:
    """``numactl --physcpubind=CPUS [--membind=NODE] -- argv``."""
    prefix = [numactl, f"--physcpubind={cpus}"]
    if mem_node is not None:
        prefix.append(f"--membind={mem_node}")
    return [*prefix, "--", *argv]


def exec_with_binding(cpus: Sequence[int], mem_node: int | None, argv: list[str],
                      who: str = "gcurun") -> None:
    """Become ``argv`` bound to ``cpus`` (and its memory to ``mem_node``): through numactl
    where this host has it and reports NUMA nodes, else pinned here with
    sched_setaffinity. Returns only by exiting."""
    numactl = shutil.which("numactl")
    if numactl and os.path.isdir("/sys/devices/system/node/node0"):
        exec_command(numactl_argv(numactl, ",".join(map(str, cpus)), mem_node, argv), who)
    exec_bound(set(cpus), argv)


def main(args: list[str]) -> None:
    if len(args) < 4 or args[0] != "--cpus" or args[2] != "--":
        sys.stderr.write("usage: bind_exec.py --cpus N[,N...] -- COMMAND [ARG...]\n")
        sys.exit(2)
    try:
        cpus = {int(c) for c in args[1].split(",")}
    except ValueError:
        sys.stderr.write(f"gcurun: --cpus {args[1]!r} is not a comma-separated list of "
                         "CPU numbers, e.g. 0,1,2,3\n")
        sys.exit(2)
    exec_bound(cpus, args[3:])


if __name__ == "__main__":
    main(sys.argv[1:])
