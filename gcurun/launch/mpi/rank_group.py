"""The MPI executor: mpirun as one child of gcurun, in its own session.

mpirun tags each line of rank output with the rank, so the output is split back into
per-rank events and the supervisor prefixes, filters and logs it as in the other modes.
mpirun's own messages (untagged) go to the supervisor as notices
(:class:`~gcurun.launch.guarded_group.GuardedLauncherGroup`, the lifecycle it shares with
srun). mpirun reports only one exit status;
when it fails, its message names the first failing rank and how it ended
(:func:`parse_mpirun_failure`); that rank becomes the root cause and every other rank is
reported as stopped by SIGTERM, which is what mpirun does to them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gcurun.config.api import Settings
from gcurun.launch.api import ExitEvent, LaunchPlan, Stream
from gcurun.launch.guarded_group import GuardedLauncherGroup
from gcurun.launch.mpi.command import MPIFlavour, MpirunCommand, build_mpirun_command
from gcurun.launch.remote.hydra_rank import EXIT_MARKER, parse_exit_marker

if TYPE_CHECKING:
    from gcurun.launch.kinds import PreparedJob

_OMPI_TAG = re.compile(rb"^\[[^\]]*?,(\d+)\]<(stdout|stderr|stddiag)>:")
_HYDRA_TAG = re.compile(rb"^\[(\d+)\] ")
_OMPI_EXIT = re.compile(r"Process name:\s*(\S+)\s*\n\s*Exit code:\s*(-?\d+)")
_OMPI_SIGNAL = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on\s+"
                          r"signal (\d+)")
_HYDRA_END = re.compile(r"RANK (\d+) PID \d+ RUNNING AT \S+\s*\n[=\s]*"
                        r"(?:EXIT CODE: (\d+)|KILLED BY SIGNAL: (\d+))")
# A rank that left while the others ran on (it never called MPI_Finalize); Open MPI 4
# says "mpirun has exited", 5 "prterun has exited".
_OMPI_IMPROPER = re.compile(r"has exited due to process rank (\d+) with PID \d+ on\s+"
                            r"node \S+ exiting\s+improperly")
# mpirun lost the daemon of a host: that host's ranks are lost (mpirun may still exit 0).
_LOST_DAEMON = re.compile(r"lost communication with a remote daemon.*?Remote daemon\s*:"
                          r"\s*\S+\s+on node (\S+)", re.S)
# What mpirun says when it is told to stop more than once: never news to the user.
_STOP_NOISE = re.compile(r"hit ctrl-c again|Abort is in progress|abort is already in "
                         r"progress", re.I)
# After gcurun has asked the guard to stop, this long is left to it (and mpirun) before
# everything left in the job's session is killed.
GUARD_SLACK = 5.0


@dataclass(frozen=True)
class MpirunFailure:
    """The first failing rank as mpirun reported it: exactly one of the two is set."""

    rank: int
    exit_code: int | None = None
    signal: int | None = None
    improper: bool = False      # it exited without MPI_Finalize while others ran on


def parse_tagged_line(line: bytes, flavour: MPIFlavour,
                      stream: Stream) -> tuple[int | None, Stream, bytes]:
    """(rank, stream, text) of one output line of mpirun; rank None for mpirun's own.

    Open MPI tags ``[job,rank]<stdout>:`` (Open MPI 5 adds a space), Hydra ``[rank] ``.
    """
    if flavour.kind == "openmpi":
        match = _OMPI_TAG.match(line)
        if match:
            rest = line[match.end():]
            if flavour.major >= 5 and rest.startswith(b" "):
                rest = rest[1:]
            tagged: Stream = "stdout" if match.group(2) == b"stdout" else "stderr"
            return int(match.group(1)), tagged, rest
        return None, stream, line
    match = _HYDRA_TAG.match(line)
    if match:
        return int(match.group(1)), stream, line[match.end():]
    return None, stream, line


def parse_mpirun_failure(text: str) -> MpirunFailure | None:
    """The first failing rank named in mpirun's messages (Open MPI 4/5, Hydra); under
    Hydra the first marker of gcurun's shim wins over what mpiexec said after it was
    stopped."""
    for line in text.splitlines():
        marker = parse_exit_marker(line.encode())
        if marker is not None:
            return MpirunFailure(marker[0], exit_code=marker[1], signal=marker[2])
    found: list[tuple[int, MpirunFailure]] = []
    for m in _OMPI_EXIT.finditer(text):
        found.append((m.start(), MpirunFailure(int(re.findall(r"\d+", m.group(1))[-1]),
                                               exit_code=int(m.group(2)))))
    for m in _OMPI_SIGNAL.finditer(text):
        found.append((m.start(), MpirunFailure(int(m.group(1)), signal=int(m.group(2)))))
    for m in _OMPI_IMPROPER.finditer(text):
        found.append((m.start(), MpirunFailure(int(m.group(1)), improper=True)))
    for m in _HYDRA_END.finditer(text):
        code, sig = m.group(2), m.group(3)
        found.append((m.start(), MpirunFailure(
            int(m.group(1)), exit_code=int(code) if code else None,
            signal=int(sig) if sig else None)))
    return min(found, key=lambda item: item[0])[1] if found else None


class MpiRankGroup(GuardedLauncherGroup):
    """Every rank of a plan, started by one mpirun."""

    label = "mpirun"

    def __init__(self, plan: LaunchPlan, command: MpirunCommand, flavour: MPIFlavour, *,
                 base_env: Mapping[str, str] | None = None,
                 cleanup_dir: str | None = None, grace_seconds: float = 10.0) -> None:
        # mpirun exports the forwarded names (-x NAME) with the values it has itself.
        env = {**(os.environ if base_env is None else base_env), **plan.launcher_env,
               **(command.env or {})}
        super().__init__([r.rank for r in plan.ranks], command.argv, env,
                         workdir=plan.workdir, grace_seconds=grace_seconds)
        self._hosts = {r.rank: r.host for r in plan.ranks}
        self._command = command
        self._flavour = flavour
        self._cleanup_dir = cleanup_dir
        self._failure_seen = False

    def _before_start(self) -> None:
        if self._command.hostfile is not None and self._command.hostfile_path:
            with open(self._command.hostfile_path, "w", encoding="utf-8") as fh:
                fh.write(self._command.hostfile)
        if self._command.ssh_script is not None and self._command.ssh_script_path:
            with open(self._command.ssh_script_path, "w", encoding="utf-8") as fh:
                fh.write(self._command.ssh_script)
            os.chmod(self._command.ssh_script_path, 0o755)

    def _after_end(self) -> None:
        if self._cleanup_dir:
            shutil.rmtree(self._cleanup_dir, ignore_errors=True)

    def _install_hint(self) -> str:
        return "install MPI or give mpirun's path with --mpirun"

    def _cannot_run(self, program: str, exc: OSError) -> str:
        return (f"cannot run '{program}': {exc.strerror or exc}; install MPI or give "
                "mpirun's path with --mpirun")

    def _split_line(self, line: bytes, stream: Stream) -> tuple[int | None, Stream, bytes]:
        """A rank's line, or under Hydra the shim's marker of a failed rank, which is
        kept as a message of mpirun's own and stops the job (Hydra would wait for the
        other ranks)."""
        rank, tagged, text = parse_tagged_line(line, self._flavour, stream)
        if rank is not None and self._flavour.kind != "openmpi" and \
                text.startswith(EXIT_MARKER.encode()) and parse_exit_marker(text):
            self._stop_after_failure()
            return None, tagged, text
        return rank, tagged, text

    def _stop_after_failure(self) -> None:
        with self._lock:
            proc, first = self._proc, not self._failure_seen
            self._failure_seen = True
        if proc is not None and first and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)

    def _stop(self, proc: subprocess.Popen[bytes], grace_seconds: float) -> None:
        """SIGTERM to the guard mpirun runs under, which passes it to mpirun once (mpirun
        stops every rank on every host) and then stops every process group left in the
        job's session; whatever is left when the guard is done or after the grace and
        some slack (at once for a grace of 0) is swept by :meth:`terminate`. mpirun
        signals only the ranks themselves, so the sweep is what stops a rank's own
        children, even after mpirun has exited. (If gcurun itself dies, the guard does
        the same.) mpirun is never signalled twice, which it answers with noise."""
        if grace_seconds > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(2 * grace_seconds + GUARD_SLACK)

    def _sweep_grace(self, proc: subprocess.Popen[bytes], grace_seconds: float) -> float:
        return grace_seconds if proc.poll() is not None else 0

    def _is_news(self, text: str, stopping: bool) -> bool:
        """What mpirun says once gcurun is stopping the job is about that stop; the
        shim's failure markers are for gcurun alone."""
        return not stopping and not _STOP_NOISE.search(text) and \
            not text.startswith(EXIT_MARKER) and not self._failure_seen

    def _exit_events(self, code: int, text: str) -> list[ExitEvent]:
        lost = _LOST_DAEMON.search(text)
        if lost is not None:
            return self._lost_host(lost.group(1), code)
        failure = parse_mpirun_failure(text) if code != 0 or self._failure_seen else None
        if code == 0 and failure is None:
            return [ExitEvent(r, exit_code=0) for r in self._ranks]
        if code < 0 and not self._failure_seen:
            return [ExitEvent(r, exit_code=None, signal=-code) for r in self._ranks]
        if failure is None or failure.rank not in self._ranks:
            lines = [line.strip() for line in text.splitlines()
                     if line.strip() and not line.startswith("---")]
            why = f"mpirun exited with code {code}" + (
                f": {lines[0]} (mpirun's whole message is above)" if lines else "")
            first = self._ranks[0]
            return [ExitEvent(first, exit_code=code, error_text=why)] + [
                ExitEvent(r, exit_code=code, error_text="mpirun ended the job")
                for r in self._ranks[1:]]
        if failure.improper:
            first_event = ExitEvent(failure.rank, exit_code=code, error_text=(
                "mpirun reported that it exited without calling MPI_Finalize while the "
                f"other ranks ran on; mpirun exited with code {code}"))
        else:
            first_event = ExitEvent(failure.rank, exit_code=failure.exit_code,
                                    signal=failure.signal,
                                    error_text="mpirun reported it as the first rank to fail")
        stopped = f"stopped by mpirun after rank {failure.rank} failed"
        return [first_event] + [ExitEvent(r, exit_code=None, signal=int(signal.SIGTERM),
                                          error_text=stopped)
                                for r in self._ranks if r != failure.rank]

    def _lost_host(self, node: str, code: int) -> list[ExitEvent]:
        """mpirun lost its daemon on ``node``: that host's first rank is the root cause
        (exit code 255, as for a lost SSH host), whatever mpirun's own status."""
        short = node.split(".")[0]
        there = [r for r in self._ranks if self._hosts[r] in (node, short)] or self._ranks
        why = (f"mpirun lost its daemon on {node} (killed, or the host or its network went "
               f"down) and ended the job (mpirun's status {code})")
        first = there[0]
        return [ExitEvent(first, exit_code=255, error_text=why)] + [
            ExitEvent(r, exit_code=None, signal=int(signal.SIGTERM),
                      error_text=f"stopped by mpirun after it lost {node}")
            for r in self._ranks if r != first]


def local_interfaces() -> dict[str, tuple[str, ...]]:
    """This host's interfaces and their IP addresses (for --network-interface CIDR)."""
    import socket

    import psutil

    return {name: tuple(a.address for a in addrs
                        if a.family in (socket.AF_INET, socket.AF_INET6))
            for name, addrs in psutil.net_if_addrs().items()}


def mpi_command(plan: LaunchPlan, settings: Settings, *, secrets: Mapping[str, str],
                folder: str, flavour: MPIFlavour | None = None,
                environ: Mapping[str, str] | None = None) -> tuple[MpirunCommand, MPIFlavour]:
    """The command (and probed flavour) for ``plan``: what --dry-run shows and runs.
    ``folder`` is the job's temporary folder: its hostfile, and under Open MPI mpirun's
    session directory (see :func:`session_base`)."""
    import dataclasses

    from gcurun.launch.mpi.command import mpirun_program, probe_mpi_flavour
    from gcurun.launch.mpi.install import mpi4py_library, program_environment

    environ = os.environ if environ is None else environ
    mpirun = mpirun_program(settings.mpi.mpirun)
    settings = dataclasses.replace(settings, mpi=dataclasses.replace(settings.mpi,
                                                                     mpirun=mpirun))
    program_env = program_environment(mpirun, environ)
    flavour = flavour or probe_mpi_flavour(mpirun, env={**environ, **program_env})
    python = settings.ssh.python or sys.executable
    interfaces = local_interfaces() if settings.mpi.network_interface and \
        flavour.kind != "openmpi" else None
    command = build_mpirun_command(
        plan, settings, flavour, is_root=os.geteuid() == 0, python=python,
        hostfile_path=os.path.join(folder, "hostfile"), secrets=secrets,
        interfaces=interfaces, launcher_env=environ, program_env=program_env,
        mpi4py_library=mpi4py_library(mpirun, flavour, {**environ, **program_env}),
        session_base=session_base(folder))
    return command, flavour


# The longest path a Unix socket may have (sun_path holds 108 bytes with its NUL).
SOCKET_PATH_MAX = 107


def session_base(folder: str, hostname: str | None = None) -> str | None:
    """``folder`` as the base of Open MPI's session directory, when the longest socket
    path its PMIx server makes there (``ompi.PID/pmix.HOST.tool.prterun-HOST-PID@0``)
    fits; else None (the system's temporary folder, as without gcurun)."""
    import socket

    host = hostname or socket.gethostname()
    pid = "4194304"         # the largest pid Linux hands out
    longest = f"{folder}/ompi.{pid}/pmix.{host}.tool.prterun-{host}-{pid}@0"
    return folder if len(longest.encode()) <= SOCKET_PATH_MAX else None


def mpi_groups(job: PreparedJob, secrets: Mapping[str, str]) -> list[MpiRankGroup]:
    """The rank groups of an MPI job: one mpirun for every rank."""
    plan, settings = job.plan, job.settings
    tmp = tempfile.mkdtemp(prefix="gcurun-mpi-")
    try:
        command, flavour = mpi_command(plan, settings, secrets=secrets, folder=tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [MpiRankGroup(plan, command, flavour, cleanup_dir=tmp,
                         grace_seconds=settings.grace_seconds)]
