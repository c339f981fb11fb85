"""What gcurun prints: the plan (table or JSON), error messages and failure reports."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from gcurun.config.api import Settings
from gcurun.errors import GcurunError, JobInterrupted, RanksFailedError
from gcurun.launch.api import LaunchPlan, RankSpec, shared_environment


def plan_header(plan: LaunchPlan) -> dict[str, Any]:
    """The job-wide part of the plan as plain data (everything but ranks and sources)."""
    return {
        "launcher": plan.launcher,
        "size": plan.size,
        "accelerator": plan.accelerator,
        "device_variable": plan.device_var,
        "device_isolation": plan.device_isolation,
        "master_addr": plan.master_addr,
        "master_port": plan.master_port,
        "workdir": plan.workdir,
        "forwarded_env": list(plan.forwarded_env),
        "launcher_env": {"mode": plan.env_forward, "forwarded": sorted(plan.launcher_env),
                         "left_out": list(plan.env_left_out)},
        "hosts": [{"name": h.name, "slots": h.slots, "user": h.user,
                   "devices": list(h.devices) if h.devices is not None else None}
                  for h in plan.hosts],
    }


def rank_to_dict(r: RankSpec, shared: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One rank as plain data with its environment: every variable gcurun sets, less those
    in ``shared`` (the job-wide ones, given once)."""
    shared = shared or {}
    return {
        "rank": r.rank, "local_rank": r.local_rank, "local_size": r.local_size,
        "cross_rank": r.cross_rank, "cross_size": r.cross_size,
        "node_rank": r.node_rank, "host": r.host, "local": r.is_local,
        "device": r.device, "argv": list(r.argv),
        "binding": None if r.binding is None else {
            "cpus": list(r.binding.cpus), "numa_node": r.binding.numa_node,
            "mem_bind": r.binding.mem_bind},
        "env": {k: v for k, v in sorted(r.env.items()) if k not in shared},
    }


def write_plan_json(plan: LaunchPlan, out: TextIO, extra: Mapping[str, Any]) -> None:
    """What `--dry-run --json` prints: the plan as one JSON object, written as it is made,
    one rank a line, so plans of a hundred thousand ranks stream out instead of being
    built in memory first. The variables every rank shares are written once, as ``env``;
    each rank's ``env`` holds the rest (a rank's environment is the two together)."""
    marker = "\u0000ranks"
    shared = dict(sorted(shared_environment(r.env for r in plan.ranks).items()))
    head = {**plan_header(plan), "env": shared, "ranks": marker,
            "sources": dict(sorted(plan.sources.items())), **extra}
    before, _, after = json.dumps(head, indent=2).partition(json.dumps(marker))
    out.write(before + "[")
    separator = "\n    "
    for r in plan.ranks:
        out.write(separator + json.dumps(rank_to_dict(r, shared)))
        separator = ",\n    "
    out.write("\n  ]" + after + "\n")


def print_plan(plan: LaunchPlan, settings: Settings, *, as_json: bool, out: TextIO,
               mpirun: tuple[Sequence[str], str | None] | None = None,
               srun: Sequence[str] | None = None) -> None:
    """The plan as a table or JSON; ``mpirun`` (argv, hostfile text) for MPI launches,
    ``srun`` (argv) for Slurm ones.

    The table gives one row to each run of ranks that differ only in their rank, local
    rank and device (the ranks of one host, as a rule), so it stays short at any size."""
    if as_json:
        extra: dict[str, Any] = {}
        if mpirun is not None:
            extra["mpirun"] = {"argv": list(mpirun[0]), "hostfile": mpirun[1]}
        if srun is not None:
            extra["srun"] = {"argv": list(srun)}
        write_plan_json(plan, out, extra)
        return
    out.write(f"launcher {plan.launcher}, {plan.size} ranks on {len(plan.hosts)} "
              f"host(s), accelerator {plan.accelerator}"
              + (f" ({device_mode(plan)})" if plan.device_var else "")
              + "\n")
    header = ("rank", "host", "local", "cross", "node", "device", "visible", "cpus", "command")
    out.write(columns([header, *(group_row(group, plan.device_isolation)
                                  for group in rank_groups(plan.ranks, plan.device_isolation))]))
    from gcurun.config.resolve import explain_settings

    out.write(columns([("setting", "value", "from"), *(
        (key, show_value(value), origin) for key, value, origin in explain_settings(settings))]))
    out.write(forwarding_lines(plan))
    if mpirun is not None:
        import shlex

        out.write("mpirun command:\n  " + shlex.join(mpirun[0]) + "\n")
        if mpirun[1] is not None:
            out.write("hostfile:\n" + "".join(f"  {line}\n"
                                              for line in mpirun[1].splitlines()))
    if srun is not None:
        import shlex

        out.write("srun command:\n  " + shlex.join(srun) + "\n")


def forwarding_lines(plan: LaunchPlan) -> str:
    """What of this environment ranks on other hosts get, by name (never a value)."""
    forwarded = ", ".join(sorted(plan.launcher_env)) or "-"
    lines = f"environment forwarded to other hosts (--env-forward {plan.env_forward}): " \
            f"{forwarded}\n"
    if plan.env_forward == "all":
        lines += f"left out: {', '.join(plan.env_left_out) or '-'}\n"
    return lines


def device_mode(plan: LaunchPlan) -> str:
    """The device variable and what it lists for each rank, in words."""
    if plan.device_isolation:
        return (f"{plan.device_var}, --device-isolation: each rank sees its own device "
                "alone, at index 0")
    return f"{plan.device_var}: each rank sees its host's devices, its own at index LOCAL_RANK"


def rank_groups(ranks: Sequence[RankSpec], isolated: bool = False) -> list[list[RankSpec]]:
    """Consecutive ranks cut into runs that differ only in rank, local rank and device:
    same host, node, cross rank and size, binding, command and visible devices (unless
    each rank sees its device alone: ``isolated``)."""
    groups: list[list[RankSpec]] = []
    for r in ranks:
        last = groups[-1][-1] if groups else None
        if last is not None and r.rank == last.rank + 1 and \
                r.local_rank == last.local_rank + 1 and \
                (r.host, r.node_rank, r.local_size, r.cross_rank, r.cross_size, r.binding,
                 r.argv) == (last.host, last.node_rank, last.local_size, last.cross_rank,
                             last.cross_size, last.binding, last.argv) and \
                (isolated or r.visible_devices is last.visible_devices or
                 r.visible_devices == last.visible_devices):
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def group_row(group: Sequence[RankSpec], isolated: bool = False) -> tuple[str, ...]:
    """The table row of one run of ranks (see :func:`rank_groups`); its ``visible``
    column is ``own`` when each rank sees its device alone (``isolated``)."""
    first, last = group[0], group[-1]
    devices = [r.device for r in group]
    device = "-" if devices[0] is None else show_ids([d or "-" for d in devices])
    if first.visible_devices is None:
        visible = "-"
    elif isolated:
        visible = "own"
    else:
        visible = show_ids(first.visible_devices)
    cpus = "-" if first.binding is None else compress_ids(first.binding.cpus)
    return (_span(first.rank, last.rank), first.host,
            f"{_span(first.local_rank, last.local_rank)}/{first.local_size}",
            f"{first.cross_rank}/{first.cross_size}", str(first.node_rank), device, visible,
            cpus, " ".join(first.argv))


def show_ids(ids: Sequence[str]) -> str:
    """Device ids in their order: ascending plain numbers as ranges (0-3,8), else
    comma-joined as given (3,1,2)."""
    if all(d.isdigit() and str(int(d)) == d for d in ids):
        numbers = [int(d) for d in ids]
        if numbers == sorted(set(numbers)):
            return compress_ids(tuple(numbers))
    return ",".join(ids)


def columns(rows: Sequence[Sequence[str]]) -> str:
    """Rows as left-aligned columns two spaces apart, the first row a header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                   .rstrip() + "\n" for row in rows)


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
        lines = [f"gcurun: job failed: {f.describe_cause()}; every other rank was stopped"]
        if f.error_text:
            lines.append(f"  {f.error_text}")
        if f.stderr_tail:
            lines.append(f"  last lines of rank {f.rank}'s stderr:")
            lines.extend(f"    {line}" for line in f.stderr_tail)
        lines.append(f"gcurun: exit code {exc.exit_code}")
        write_within(err, "\n".join(lines) + "\n")
    elif isinstance(exc, JobInterrupted):
        write_within(err, f"gcurun: {exc}\n")
    else:
        write_within(err, f"gcurun: error: {exc}\n")


# gcurun's last words wait this long for a console that does not read (a full pipe).
LAST_WORDS_SECONDS = 2.0


def write_within(stream: TextIO, text: str, seconds: float = LAST_WORDS_SECONDS) -> None:
    """Write ``text`` to ``stream``, giving up after ``seconds`` when nobody reads it: a
    console that does not read must not keep gcurun alive after its job ended."""
    import os
    import threading

    try:
        fd = stream.fileno()
        stream.flush()
    except (AttributeError, OSError, ValueError):
        stream.write(text)
        stream.flush()
        return
    data = memoryview(text.encode(getattr(stream, "encoding", None) or "utf-8",
                                  errors="replace"))

    def write() -> None:
        nonlocal data
        try:
            while data:
                data = data[os.write(fd, data):]
        except OSError:
            pass

    writer = threading.Thread(target=write, daemon=True, name="last-words")
    writer.start()
    writer.join(seconds)
