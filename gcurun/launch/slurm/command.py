"""The srun command of a plan, and srun's output read back. Pure.

One srun step runs every rank: ``--distribution=arbitrary`` with a node list naming each
rank's host in rank order places task N where the plan put rank N, so SLURM_PROCID is
the plan's rank. Every task runs :mod:`gcurun.launch.remote.mpi_shim` first, which turns
Slurm's variables into gcurun's rank environment (device, binding, Paddle's and JAX's
variables included) and execs the command.

srun passes its own environment to every task, so the job-wide part of the plan's
environment, the layout the shim needs and the job's secrets travel there, never on the
command line. The plan decides binding and devices: srun gets ``--cpu-bind=none`` when
``--bind-to`` is given, and the accelerator's variable is left out of srun's environment
so that, in a task, it is set only where Slurm's GRES set it (the shim then takes it).
Of the launcher's environment, srun propagates what gcurun forwards
(:mod:`gcurun.launch.planning.forwarding`): with ``--env-forward all`` its own environment
less the variables that belong to this host (removed from srun's environment); with
``listed``, ``--export`` names the job's variables, the forwarded ones, PATH and
PYTHONPATH (Slurm adds its own SLURM_* ones).

srun's output carries ``--label`` prefixes (``3: text``), which become per-rank output;
its own messages start ``srun:``. With ``--kill-on-bad-exit`` srun stops the other tasks
when one fails and exits with the highest status, usually the 143 of a task it stopped;
the task that failed first is named in srun's messages (:func:`parse_srun_failure`).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gcurun.config.api import Settings
from gcurun.errors import LaunchError
from gcurun.launch.api import LaunchPlan
from gcurun.launch.mpi.command import job_environment, layout_environment
from gcurun.launch.remote import mpi_shim

SHIM_MODULE = mpi_shim.__name__
STEP_NAME_PREFIX = "gcurun-"
# Options srun reads from the environment that would fight the plan's placement (an
# sbatch --ntasks-per-node, a hostfile that overrides the node list).
PLACEMENT_VARIABLES = ("SLURM_NTASKS_PER_NODE", "SLURM_HOSTFILE")
# What a task needs to find the shim's interpreter and gcurun when srun exports a list.
LISTED_ALWAYS = ("PATH", "PYTHONPATH")

_LABEL = re.compile(rb"^ *(\d+): ")
_STEPD = re.compile(rb"^slurmstepd(?:-[^:\s]*)?: ")
_TASK_END = re.compile(r"^srun: error: ([^:\s]+): tasks? (\d+)[\d,-]*: (.+?)\s*$", re.M)
_EXIT_CODE = re.compile(r"Exited with exit code (\d+)")
_SIGNALS = {signal.strsignal(s): int(s) for s in signal.Signals if signal.strsignal(s)}


@dataclass(frozen=True)
class SrunCommand:
    """What to run: ``argv``, and the variables to set in (``env``: values may be
    secret, never shown) and remove from (``unset``) srun's environment."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    unset: tuple[str, ...]
    step_name: str


@dataclass(frozen=True)
class SrunFailure:
    """The first failing task as srun reported it: exactly one of the two is set."""

    rank: int
    host: str
    exit_code: int | None = None
    signal: int | None = None


def build_srun_command(plan: LaunchPlan, settings: Settings, *, python: str,
                       step_name: str, pmix: bool = False,
                       bindings: str | None = None,
                       secrets: Mapping[str, str] | None = None,
                       job_name: str | None = None) -> SrunCommand:
    """The srun step that runs ``plan``.

    ``python`` runs the rank shim on every node; ``pmix`` adds ``--mpi=pmix`` (the mpi
    backend); ``bindings`` is the shim's ``GCURUN_BINDINGS`` when ranks are bound;
    ``secrets`` go into srun's environment only; ``job_name`` is the allocation's
    SLURM_JOB_NAME, which the tasks get back. Raises LaunchError when ranks run
    different commands (srun starts one command).
    """
    if len({r.argv for r in plan.ranks}) != 1:
        raise LaunchError("ranks of this plan run different commands, but srun starts "
                          "one command everywhere; use the local or ssh launcher")
    nodes = rank_hosts(plan)
    argv = ["srun", f"--job-name={step_name}", f"--ntasks={plan.size}",
            f"--nodes={len(nodes)}", "--nodelist=" + ",".join(r.host for r in plan.ranks),
            "--distribution=arbitrary", "--kill-on-bad-exit=1", "--label",
            f"--chdir={plan.workdir}"]
    if settings.bind_to != "none":
        argv.append("--cpu-bind=none")
    if settings.oversubscribe:
        argv.append("--overcommit")
    if pmix:
        argv.append("--mpi=pmix")
    env = {**job_environment(plan), **layout_environment(plan, settings)}
    if plan.device_var:
        env["GCURUN_GRES_DEVICES"] = "1"
    if bindings:
        env["GCURUN_BINDINGS"] = bindings
    if job_name is not None:
        env[mpi_shim.JOB_NAME_VARIABLE] = job_name
    env.update(secrets or {})
    unset = PLACEMENT_VARIABLES + ((plan.device_var,) if plan.device_var else ())
    if plan.env_forward == "listed":
        names = dict.fromkeys([*LISTED_ALWAYS, *sorted(plan.launcher_env), *sorted(env)])
        argv.append("--export=" + ",".join(names))
    else:
        unset += tuple(n for n in plan.env_left_out if n not in unset)
    argv += [python, "-m", SHIM_MODULE, "--", *plan.ranks[0].argv]
    return SrunCommand(argv=tuple(argv), env=env, unset=unset, step_name=step_name)


def parse_labelled_line(line: bytes) -> tuple[int | None, bytes]:
    """(task, text) of one line srun printed with ``--label``; task None for a line of
    srun's own, or of slurmstepd's (``slurmstepd-h1: error: *** STEP 5.0 CANCELLED``)."""
    match = _LABEL.match(line)
    if match is None:
        return None, line
    text = line[match.end():]
    if _STEPD.match(text):
        return None, text
    return int(match.group(1)), text


def parse_srun_failure(text: str) -> SrunFailure | None:
    """The first task srun's messages name as failed (``srun: error: h2: task 1: Exited
    with exit code 3``, ``... tasks 0-1: Segmentation fault``), or None."""
    for match in _TASK_END.finditer(text):
        host, rank, what = match.group(1), int(match.group(2)), match.group(3)
        code = _EXIT_CODE.fullmatch(what)
        if code:
            return SrunFailure(rank, host, exit_code=int(code.group(1)))
        signum = _SIGNALS.get(what.removesuffix(" (core dumped)"))
        if signum is not None:
            return SrunFailure(rank, host, signal=signum)
    return None


def rank_hosts(plan: LaunchPlan) -> Sequence[str]:
    """The plan's hosts, each once, in rank order."""
    return list(dict.fromkeys(r.host for r in plan.ranks))
