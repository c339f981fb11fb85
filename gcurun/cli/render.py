"""What gcurun prints: the plan (table or JSON), error messages and failure reports."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from gcurun.config.api import Settings
from gcurun.errors import GcurunError, JobInterrupted, RanksFailedError
from gcurun.launch.api import LaunchPlan


def plan_to_dict(plan: LaunchPlan) -> dict[str, Any]:
    """The plan as plain data: what `--dry-run --json` prints, each rank's full
    environment (the variables gcurun sets) included."""
    return {
        "launcher": plan.launcher,
        "size": plan.size,
        "accelerator": plan.accelerator,
        "device_variable": plan.device_var,
        "master_addr": plan.master_addr,
        "master_port": plan.master_port,
        "workdir": plan.workdir,
        "forwarded_env": list(plan.forwarded_env),
        "hosts": [{"name": h.name, "slots": h.slots, "user": h.user,
                   "devices": list(h.devices) if h.devices is not None else None}
                  for h in plan.hosts],
        "ranks": [{
            "rank": r.rank, "local_rank": r.local_rank, "local_size": r.local_size,
            "cross_rank": r.cross_rank, "cross_size": r.cross_size,
            "node_rank": r.node_rank, "host": r.host, "local": r.is_local,
            "device": r.device, "argv": list(r.argv),
            "binding": None if r.binding is None else {
                "cpus": list(r.binding.cpus), "numa_node": r.binding.numa_node,
                "mem_bind": r.binding.mem_bind},
            "env": dict(sorted(r.env.items())),
        } for r in plan.ranks],
        "sources": dict(sorted(plan.sources.items())),
    }


def print_plan(plan: LaunchPlan, settings: Settings, *, as_json: bool, out: TextIO,
               mpirun: tuple[Sequence[str], str | None] | None = None,
               srun: Sequence[str] | None = None) -> None:
    """The plan as a table or JSON; ``mpirun`` (argv, hostfile text) for MPI launches,
    ``srun`` (argv) for Slurm ones."""
    if as_json:
        data = plan_to_dict(plan)
        if mpirun is not None:
            data["mpirun"] = {"argv": list(mpirun[0]), "hostfile": mpirun[1]}
        if srun is not None:
            data["srun"] = {"argv": list(srun)}
        out.write(json.dumps(data, indent=2) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, highlight=False, soft_wrap=True)
    console.print(f"launcher {plan.launcher}, {plan.size} ranks on {len(plan.hosts)} "
                  f"host(s), accelerator {plan.accelerator}"
                  + (f" ({plan.device_var})" if plan.device_var else ""))
    table = Table("rank", "host", "local", "cross", "node", "device", "cpus", "command",
                  box=None, pad_edge=False)
    for r in plan.ranks:
        cpus = "-" if r.binding is None else compress_ids(r.binding.cpus)
        table.add_row(str(r.rank), r.host, f"{r.local_rank}/{r.local_size}",
                      f"{r.cross_rank}/{r.cross_size}", str(r.node_rank), r.device or "-",
                      cpus, " ".join(r.argv))
    console.print(table)
    from gcurun.config.resolve import explain_settings

    sources = Table("setting", "value", "from", box=None, pad_edge=False)
    for key, value, origin in explain_settings(settings):
        sources.add_row(key, show_value(value), origin)
    console.print(sources)
    if mpirun is not None:
        import shlex

        out.write("mpirun command:\n  " + shlex.join(mpirun[0]) + "\n")
        if mpirun[1] is not None:
            out.write("hostfile:\n" + "".join(f"  {line}\n"
                                              for line in mpirun[1].splitlines()))
    if srun is not None:
        import shlex

        out.write("srun command:\n  " + shlex.join(srun) + "\n")


def show_value(value: Any) -> str:
    """A setting as a person would type it: hosts as a -H spec, tuples comma-joined."""
    if isinstance(value, tuple) and value and hasattr(value[0], "display"):
        return ",".join(f"{h.display}:{h.slots}" for h in value)
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "-"
    if isinstance(value, dict):
        return ",".join(sorted(value))
    return "-" if value is None else str(value)


def compress_ids(ids: tuple[int, ...]) -> str:
    """(0, 1, 2, 3, 8) -> '0-3,8'."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def report_error(exc: GcurunError, err: TextIO | None = None) -> None:
    """Print an error as a person should read it: the root cause of a failed job with the
    tail of its stderr, or the one-line message of bad input."""
    err = err or sys.stderr
    if isinstance(exc, RanksFailedError):
        f = exc.failure
        lines = [f"gcurun: job failed: {f.describe()} (root cause); "
                 f"every other rank was stopped"]
        if f.error_text:
            lines.append(f"  {f.error_text}")
        if f.stderr_tail:
            lines.append(f"  last lines of rank {f.rank}'s stderr:")
            lines.extend(f"    {line}" for line in f.stderr_tail)
        lines.append(f"gcurun: exit code {exc.exit_code}")
        err.write("\n".join(lines) + "\n")
    elif isinstance(exc, JobInterrupted):
        err.write(f"gcurun: {exc}\n")
    else:
        err.write(f"gcurun: error: {exc}\n")
    err.flush()
