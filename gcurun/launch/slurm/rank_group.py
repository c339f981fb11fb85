"""The Slurm executor's rank group: one srun step for every rank, as one child of gcurun.

srun runs under the session guard, as mpirun does
(:mod:`gcurun.launch.remote.session_guard`; the lifecycle both share is
:class:`~gcurun.launch.guarded_group.GuardedLauncherGroup`): if gcurun dies, the guard
sends srun SIGTERM, on which srun kills every task at once. srun's labelled output is
split back into per-rank events; its own messages go to the supervisor as notices.
srun reports one exit status, so the ranks' exits are reported when it ends: the task
its messages name as the first to fail is the root cause, every other rank was stopped
by srun (SIGTERM).

Stopping the step (Ctrl-C, another rank's failure) is Slurm's graceful way, measured in
docs/slurm.md: ``scancel --signal=TERM JOB.STEP`` (SIGTERM to every task), the grace
period, then ``scancel JOB.STEP`` (SIGKILL); then srun and the guard are stopped too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gcurun.errors import LaunchError
from gcurun.launch.api import ExitEvent, LaunchPlan, RankGroup, Stream
from gcurun.launch.guarded_group import GuardedLauncherGroup
from gcurun.launch.slurm.command import (
    STEP_NAME_PREFIX,
    SrunCommand,
    build_srun_command,
    parse_labelled_line,
    parse_srun_failure,
)

if TYPE_CHECKING:
    from gcurun.launch.kinds import PreparedJob

# Every Slurm client command gcurun runs (squeue, scancel) gets this long.
CLIENT_SECONDS = 15.0
# After ``scancel JOB.STEP`` (SIGKILL to every task), srun gets this long to exit.
KILL_SECONDS = 15.0


class SlurmRankGroup(GuardedLauncherGroup):
    """Every rank of a plan, started by one srun step of the allocation ``job_id``."""

    label = "srun"

    def __init__(self, plan: LaunchPlan, command: SrunCommand, job_id: str, *,
                 base_env: Mapping[str, str] | None = None,
                 grace_seconds: float = 10.0) -> None:
        base = dict(os.environ if base_env is None else base_env)
        for name in command.unset:
            base.pop(name, None)
        super().__init__([r.rank for r in plan.ranks], command.argv,
                         {**base, **command.env}, workdir=plan.workdir,
                         grace_seconds=grace_seconds)
        self._command = command
        self._job_id = job_id

    def _install_hint(self) -> str:
        return "--slurm needs Slurm's client commands (srun, squeue, scancel)"

    def _split_line(self, line: bytes, stream: Stream) -> tuple[int | None, Stream, bytes]:
        rank, text = parse_labelled_line(line)
        return rank, stream, text

    def _stop(self, proc: subprocess.Popen[bytes], grace_seconds: float) -> None:
        """Stop the step through Slurm: SIGTERM to every task, ``grace_seconds``, SIGKILL;
        srun, the guard and anything left in their session are swept after."""
        step = find_step(self._job_id, self._command.step_name)
        if step is None:
            return  # not created yet (or already gone): stopping srun kills its tasks
        if grace_seconds > 0:
            scancel(["--signal=TERM", step])
            if _waited(proc, grace_seconds):
                return
        scancel([step])
        _waited(proc, KILL_SECONDS)

    def _exit_events(self, code: int, messages: str) -> list[ExitEvent]:
        return exit_events(self._ranks, code, messages)


def exit_events(ranks: Sequence[int], code: int, messages: str) -> list[ExitEvent]:
    """The ranks' exits from srun's exit status and messages: all 0 when srun exited 0;
    else the first task srun names as failed, with its own code or signal (not srun's,
    which is the highest of all tasks), and every other rank stopped by SIGTERM."""
    if code == 0:
        return [ExitEvent(r, exit_code=0) for r in ranks]
    if code < 0:
        return [ExitEvent(r, exit_code=None, signal=-code) for r in ranks]
    failure = parse_srun_failure(messages)
    if failure is None or failure.rank not in ranks:
        summary = " ".join(line.strip() for line in messages.splitlines()
                           if line.strip())[-2000:]
        why = f"srun exited with code {code}" + (f": {summary}" if summary else "")
        return [ExitEvent(ranks[0], exit_code=code, error_text=why)] + [
            ExitEvent(r, exit_code=code, error_text="srun ended the step")
            for r in ranks[1:]]
    first = ExitEvent(failure.rank, exit_code=failure.exit_code, signal=failure.signal,
                      error_text="srun reported it as the first task to fail")
    stopped = f"stopped by srun after rank {failure.rank} failed"
    return [first] + [ExitEvent(r, exit_code=None, signal=int(signal.SIGTERM),
                                error_text=stopped)
                      for r in ranks if r != failure.rank]


def _waited(proc: subprocess.Popen[bytes], seconds: float) -> bool:
    """Whether ``proc`` ended within ``seconds``."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def find_step(job_id: str, step_name: str) -> str | None:
    """``JOB.STEP`` of the running step named ``step_name`` in job ``job_id``, or None."""
    try:
        done = subprocess.run(["squeue", "--noheader", "--steps", f"--jobs={job_id}",
                               "--format=%i %j"], capture_output=True, text=True,
                              timeout=CLIENT_SECONDS, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in done.stdout.splitlines():
        step, _, name = line.strip().partition(" ")
        if name.strip() == step_name:
            return step
    return None


def scancel(args: Sequence[str]) -> None:
    """Run ``scancel ARGS`` within its deadline; a failure leaves srun to be stopped."""
    try:
        subprocess.run(["scancel", *args], capture_output=True, timeout=CLIENT_SECONDS,
                       stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired):
        pass


def new_step_name() -> str:
    return STEP_NAME_PREFIX + uuid.uuid4().hex[:12]


def srun_command(job: PreparedJob, secrets: Mapping[str, str],
                 environ: Mapping[str, str] | None = None,
                 step_name: str | None = None) -> SrunCommand:
    """The srun step of a prepared job: what --dry-run shows and a run starts."""
    from gcurun.launch.slurm.prepare import uses_pmix

    environ = os.environ if environ is None else environ
    plan, settings = job.plan, job.settings
    return build_srun_command(
        plan, settings, python=settings.ssh.python or sys.executable,
        step_name=step_name or new_step_name(), pmix=uses_pmix(settings),
        bindings=encoded_bindings(plan), secrets=secrets,
        job_name=environ.get("SLURM_JOB_NAME"))


def encoded_bindings(plan: LaunchPlan) -> str | None:
    """The shim's GCURUN_BINDINGS for the plan's bound ranks; None when none is bound."""
    from gcurun.launch.remote.mpi_shim import RankBinding, encode_bindings

    if all(r.binding is None for r in plan.ranks):
        return None
    return encode_bindings([None if r.binding is None else RankBinding(
        r.binding.cpus, r.binding.numa_node, r.binding.mem_bind) for r in plan.ranks])


def slurm_groups(job: PreparedJob, secrets: Mapping[str, str]) -> list[RankGroup]:
    """The rank group of a Slurm job: one srun step for every rank. An address of the
    launcher given as ``*:PORT`` stays so: the rank shim fills in the address srun ran
    from."""
    from gcurun.hosts.slurm import parse_slurm_environment

    allocation = parse_slurm_environment(os.environ)
    if allocation is None:
        raise LaunchError("--slurm needs a Slurm allocation (SLURM_JOB_ID is not set); run "
                          "gcurun inside salloc or an sbatch script")
    command = srun_command(job, secrets)
    return [SlurmRankGroup(job.plan, command, allocation.job_id,
                           grace_seconds=job.settings.grace_seconds)]
