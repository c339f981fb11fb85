"""How a bootstrap (:mod:`gcurun.launch.remote.bootstrap`) starts a rank: its
environment, its argv under a memory binding, what the child does before exec, and the
exit code and message of a rank that could not be started.

Stdlib only (with gcurun's stdlib-only modules): it runs on the ranks' hosts.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gcurun.launch.remote.horovod_alias import alias_environment
from gcurun.launch.remote.session_guard import death_signal_setter


def merged_environment(base: Mapping[str, str], rank_env: Mapping[str, str],
                       secrets: Mapping[str, str],
                       shared: Mapping[str, str] | None = None,
                       forwarded: Mapping[str, str] | None = None) -> dict[str, str]:
    """A rank's environment: the login (or launcher's) environment, then what the
    launcher forwarded of its own, then the variables all ranks of the job share, then
    the rank's own, then the secrets; gcurun's Horovod aliases first on PYTHONPATH where
    the job asks for them."""
    env = {**base, **(forwarded or {}), **(shared or {}), **rank_env, **secrets}
    env.update(alias_environment(env))
    return env


def binding_argv(argv: Sequence[str], binding: Mapping[str, Any] | None,
                 which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """``argv`` under ``numactl --membind`` when the binding asks for memory binding to a
    NUMA node and numactl exists on this host; else ``argv`` itself."""
    if binding and binding.get("mem_bind") and binding.get("numa_node") is not None:
        numactl = which("numactl")
        if numactl:
            return [numactl, f"--membind={binding['numa_node']}", "--", *argv]
    return list(argv)


def child_setup(cpus: Sequence[int] | None) -> Callable[[], None]:
    """What a rank's child process does before exec: die with the bootstrap (so even a
    killed bootstrap leaves no rank behind) and take its CPUs."""
    die_with_parent = death_signal_setter(signal.SIGKILL)

    def setup() -> None:
        die_with_parent()
        if cpus:
            os.sched_setaffinity(0, cpus)

    return setup


def spawn_failure(program: str, exc: BaseException, path: str, host: str) -> tuple[int, str]:
    """Exit code and message for a rank that could not be started (127 / 126, as a
    shell would say)."""
    if isinstance(exc, FileNotFoundError):
        return 127, (f"cannot run '{program}' on {host}: no such program on PATH "
                     f"({path}); install it there or give its full path")
    if isinstance(exc, PermissionError):
        if os.path.isdir(program):
            return 126, (f"cannot run '{program}' on {host}: it is a directory; give the "
                         "program to run in it")
        return 126, f"cannot run '{program}' on {host}: permission denied"
    if isinstance(exc, OSError) and exc.errno in (errno.EAGAIN, errno.EMFILE, errno.ENFILE):
        return 1, (f"cannot run '{program}' on {host}: {exc.strerror}; the host's limit on "
                   "processes or open files (ulimit -u / -n, a cgroup's pids.max) is "
                   "reached: start fewer ranks there or raise the limit")
    if isinstance(exc, subprocess.SubprocessError):
        return 1, f"cannot apply the CPU binding on {host} before running '{program}': {exc}"
    return 1, f"cannot run '{program}' on {host}: {exc}"
