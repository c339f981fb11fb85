"""The Slurm executor's rank group: one srun step for every rank, as one child of gcurun.

srun runs under the guard that keeps mpirun jobs from outliving gcurun
(:mod:`gcurun.launch.remote.mpi_guard`): if gcurun dies, the guard sends srun SIGTERM,
on which srun kills every task at once. srun's labelled output is split back into
per-rank events; its own messages go to ``notice``. srun reports one exit status, so
the ranks' exits are reported when it ends: the task its messages name as the first to
fail is the root cause, every other rank was stopped by srun (SIGTERM).

Stopping the step (Ctrl-C, another rank's failure) is Slurm's graceful way, measured in
docs/slurm.md: ``scancel --signal=TERM JOB.STEP`` (SIGTERM to every task), the grace
period, then ``scancel JOB.STEP`` (SIGKILL); then srun and the guard are stopped too.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import IO, TYPE_CHECKING

from gcurun.errors import LaunchError
from gcurun.launch.api import Event, ExitEvent, LaunchPlan, OutputEvent, RankGroup, Stream
from gcurun.launch.mpi.rank_group import guarded, session_groups
from gcurun.launch.slurm.command import (
    STEP_NAME_PREFIX,
    SrunCommand,
    build_srun_command,
    parse_labelled_line,
    parse_srun_failure,
)
from gcurun.launch.supervision.stopping import stop_processes

if TYPE_CHECKING:
    from gcurun.launch.prepared import PreparedJob

# Every Slurm client command gcurun runs (squeue, scancel) gets this long.
CLIENT_SECONDS = 15.0
# After ``scancel JOB.STEP`` (SIGKILL to every task), srun gets this long to exit.
KILL_SECONDS = 15.0
_NOTICE_LINES = 40


def default_notice(line: str) -> None:
    sys.stderr.write(f"[srun] {line}")
    sys.stderr.flush()


class SlurmRankGroup:
    """Every rank of a plan, started by one srun step of the allocation ``job_id``."""

    def __init__(self, plan: LaunchPlan, command: SrunCommand, job_id: str, *,
                 base_env: Mapping[str, str] | None = None,
                 notice: Callable[[str], None] = default_notice,
                 grace_seconds: float = 10.0) -> None:
        self._ranks = [r.rank for r in plan.ranks]
        self._hosts = {r.rank: r.host for r in plan.ranks}
        self._command = command
        self._job_id = job_id
        self._workdir = plan.workdir
        base = dict(os.environ if base_env is None else base_env)
        for name in command.unset:
            base.pop(name, None)
        self._env = {**base, **command.env}
        self._notice = notice
        self._grace = grace_seconds
        self._proc: subprocess.Popen[bytes] | None = None
        self._messages: list[str] = []
        self._lock = threading.Lock()

    def start(self, events: queue.Queue[Event]) -> None:
        """Start srun. Raises LaunchError when it cannot run."""
        argv = list(self._command.argv)
        if shutil.which(argv[0], path=self._env.get("PATH")) is None:
            raise LaunchError(f"cannot run '{argv[0]}': not found on PATH; --slurm needs "
                              "Slurm's client commands (srun, squeue, scancel)")
        try:
            proc = subprocess.Popen(guarded(argv, self._grace), env=self._env,
                                    cwd=self._workdir, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
        except OSError as exc:
            raise LaunchError(f"cannot run '{argv[0]}': {exc.strerror or exc}") from exc
        with self._lock:
            self._proc = proc
        readers = [threading.Thread(target=self._pump, args=(pipe, name, events),
                                    daemon=True, name=f"srun-{name}")
                   for pipe, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr"))]
        for t in readers:
            t.start()
        threading.Thread(target=self._wait, args=(proc, readers, events), daemon=True,
                         name="srun-wait").start()

    def terminate(self, grace_seconds: float) -> None:
        """Stop the step (SIGTERM to every task, ``grace_seconds``, SIGKILL) through
        Slurm, then srun, the guard and anything left in their session on this host.
        Idempotent."""
        with self._lock:
            proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            self._stop_step(proc, grace_seconds)
        groups = session_groups(proc.pid)
        if proc.poll() is None:
            groups.add(proc.pid)
        if groups:
            stop_processes(sorted(groups), grace_seconds)

    def pids(self) -> dict[int, int]:
        """Every rank maps to the pid of the guard that runs srun (the one process of
        the job gcurun owns)."""
        with self._lock:
            return {r: self._proc.pid for r in self._ranks} if self._proc else {}

    # -- stopping ---------------------------------------------------------------------
    def _stop_step(self, proc: subprocess.Popen[bytes], grace_seconds: float) -> None:
        step = find_step(self._job_id, self._command.step_name)
        if step is None:
            return  # not created yet (or already gone): stopping srun kills its tasks
        if grace_seconds > 0:
            scancel(["--signal=TERM", step])
            if _waited(proc, grace_seconds):
                return
        scancel([step])
        _waited(proc, KILL_SECONDS)

    # -- the reader threads -----------------------------------------------------------
    def _pump(self, pipe: IO[bytes], stream: Stream, events: queue.Queue[Event]) -> None:
        try:
            for line in iter(pipe.readline, b""):
                rank, text = parse_labelled_line(line)
                if rank is not None and rank in self._hosts:
                    events.put(OutputEvent(rank, stream, text))
                else:
                    self._launcher_line(text.decode("utf-8", "replace"))
        except (OSError, ValueError):
            pass
        finally:
            pipe.close()

    def _launcher_line(self, text: str) -> None:
        with self._lock:
            self._messages.append(text)
            del self._messages[:-_NOTICE_LINES * 4]
        self._notice(text if text.endswith("\n") else text + "\n")

    def _wait(self, proc: subprocess.Popen[bytes], readers: list[threading.Thread],
              events: queue.Queue[Event]) -> None:
        code = proc.wait()
        for t in readers:
            t.join()
        for rank in self._ranks:
            for stream in ("stdout", "stderr"):
                events.put(OutputEvent(rank, stream, b""))   # type: ignore[arg-type]
        with self._lock:
            text = "".join(self._messages)
        for event in exit_events(self._ranks, code, text):
            events.put(event)


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
        bindings=plan_bindings(plan), secrets=secrets,
        job_name=environ.get("SLURM_JOB_NAME"))


def plan_bindings(plan: LaunchPlan) -> str | None:
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
