"""Host discovery: the script's output parsed (pure), the script run (with a deadline),
and fixed hosts (``-H`` with ``--min-np``)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from gcurun.errors import HostSpecError, UsageError
from gcurun.hosts.api import HostSpec
from gcurun.hosts.hostlist import Problem
from gcurun.hosts.item import parse_item


class DiscoveryError(Exception):
    """The discovery script failed or printed something that does not parse;
    ``exit_code`` is 2 for bad output, 1 for a failed run."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def parse_discovery_output(text: str, default_slots: int | None,
                           script: str = "the discovery script") -> tuple[HostSpec, ...]:
    """One host per line in ``-H`` syntax (``host:slots``, a bare ``host`` with
    ``default_slots``, ``user@host:4``, ``[fe80::1]:2``, a hostlist ``node[01-04]:8``);
    blank lines and ``#`` comments are skipped; a host listed twice keeps its first
    place and its last slot count.

    Raises DiscoveryError (exit code 2) quoting the bad line."""
    found: dict[str, HostSpec] = {}
    for line in text.splitlines():
        item = line.split("#", 1)[0].strip()
        if not item:
            continue
        try:
            parsed = parse_item(item)
        except (Problem, HostSpecError) as problem:
            raise DiscoveryError(f"{script} printed '{item}': {problem}", 2) from None
        slots = parsed.slots if parsed.slots is not None else default_slots
        if slots is None:
            name = parsed.names[0] if parsed.names else item
            raise DiscoveryError(f"{script} printed '{item}' without a slot count; print "
                                 f"'{name}:SLOTS' or pass --slots N", 2)
        for name in parsed.names:
            found[name] = HostSpec(name, slots=slots, user=parsed.user)
    return tuple(found.values())


def discovery_argv(script: str) -> list[str]:
    """How to run ``script``: a file that exists (``hosts.sh`` in this directory too, as
    horovodrun runs it) by its path; a command line with arguments (``python3 find.py``)
    through ``/bin/sh``, as horovodrun does; else a program looked for on PATH. Raises
    DiscoveryError for a file that is not executable."""
    if os.path.isfile(script):
        if not os.access(script, os.X_OK):
            raise DiscoveryError(f"discovery script '{script}' is not executable; run "
                                 f"chmod +x {script}", 2)
        return [os.path.abspath(script)]
    if any(c.isspace() for c in script.strip()):
        return ["/bin/sh", "-c", script]
    return [script]


def run_discovery(script: str, default_slots: int | None,
                  timeout: float) -> tuple[HostSpec, ...]:
    """Run ``script`` and parse what it prints. Raises DiscoveryError when it cannot
    run, exits non-zero, runs past ``timeout`` seconds or prints a bad line."""
    try:
        done = subprocess.run(discovery_argv(script), capture_output=True, timeout=timeout,
                              check=False, text=True)
    except subprocess.TimeoutExpired:
        raise DiscoveryError(f"discovery script '{script}' ran past {timeout:g} s; make "
                             "it print the hosts and exit sooner") from None
    except OSError as exc:
        raise DiscoveryError(f"cannot run the discovery script '{script}': "
                             f"{exc.strerror or exc}; give an executable file", 2) from None
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise DiscoveryError(f"discovery script '{script}' exited with code "
                             f"{done.returncode}{': ' + tail if tail else ''}")
    return parse_discovery_output(done.stdout, default_slots, f"discovery script '{script}'")


def check_fixed_hosts(hosts: Sequence[HostSpec], spec: str) -> None:
    """``-H``/``--hostfile`` with ``--min-np``: Horovod's rule of at least two hosts."""
    if len(hosts) < 2:
        raise UsageError(f"--min-np with -H '{spec}': elastic jobs need at least 2 hosts "
                         "(a host whose ranks fail is blacklisted); add hosts or drop "
                         "--min-np")
