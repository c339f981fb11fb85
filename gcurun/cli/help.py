"""``gcurun --help`` in groups and ``gcurun help [TOPIC]``.

The run command's options are listed by group (hosts, devices, ...): :data:`GROUPS` names
every option once, and a test checks that no option is left out. A topic is a group, a
subcommand, or one of the texts below (environment variables, exit codes, profiles); the
environment topic is written from the settings table itself, so it cannot fall behind it.
"""

from __future__ import annotations

from dataclasses import dataclass

import click

from gcurun.cli.horovodrun_options import AbbreviatingCommand


@dataclass(frozen=True)
class Group:
    """Options listed together in ``gcurun --help``: the topic that shows them alone
    (``gcurun help ssh``), a title and the click parameter names, in order."""

    topic: str
    title: str
    summary: str
    params: tuple[str, ...]


GROUPS: tuple[Group, ...] = (
    Group("hosts", "Hosts and ranks", "where ranks run and how they start",
          ("np", "hosts", "hostfile", "oversubscribe", "profile", "launcher", "use_slurm",
           "use_gloo", "config_file")),
    Group("devices", "Devices and binding", "which accelerator each rank uses; CPU binding",
          ("accelerator", "devices", "device_isolation", "bind_to", "map_by",
           "report_bindings")),
    Group("ranks", "The ranks' environment", "what every rank gets besides its plan",
          ("env", "env_forward", "workdir", "master_addr", "master_port", "horovod_alias")),
    Group("output", "Output and logging", "the ranks' output and the launcher's messages",
          ("output_dir", "output_filename", "show_ranks", "color",
           "prefix_output_with_timestamp", "verbose", "log_level", "log_with_timestamp",
           "log_hide_timestamp", "log_show_timestamp")),
    Group("failures", "Failures and timeouts", "when a job counts as failed and how it stops",
          ("grace_seconds", "liveness_timeout", "gloo_timeout_seconds")),
    Group("mpi", "MPI", "starting ranks with mpirun",
          ("use_mpi", "mpirun", "mpi_args", "network_interface", "network_interfaces",
           "binding_args", "use_jsrun", "mpi_threads_disable", "tcp_flag")),
    Group("ssh", "SSH", "starting ranks on other hosts over SSH",
          ("ssh_user", "ssh_port", "ssh_identity_file", "ssh_config", "ssh_timeout",
           "start_timeout", "host_key_policy", "python", "disable_cache")),
    Group("runtime", "Runtime knobs", "the collective engine of every rank",
          ("fusion_threshold_mb", "cycle_time_ms", "cache_capacity", "timeline_filename",
           "timeline_mark_cycles", "stall_check", "stall_check_warning_seconds",
           "stall_check_warning_time_seconds", "stall_check_shutdown_seconds",
           "stall_check_shutdown_time_seconds", "hierarchical_allreduce",
           "hierarchical_allgather", "torus_allreduce", "num_nccl_streams",
           "thread_affinity")),
    Group("autotune", "Autotune", "the runtime knobs found while the job runs",
          ("autotune", "autotune_log_file", "autotune_warmup_samples",
           "autotune_steps_per_sample", "autotune_bayes_opt_max_samples",
           "autotune_gaussian_process_noise", "autotune_cache")),
    Group("elastic", "Elastic jobs", "jobs that shrink and grow with their hosts",
          ("min_np", "max_np", "host_discovery_script", "slots", "reset_limit",
           "elastic_timeout", "blacklist_cooldown_range")),
    Group("general", "What to do", "plans, checks, versions",
          ("dry_run", "as_json", "preflight", "check_build", "version", "help")),
)

GROUP_OF: dict[str, Group] = {name: group for group in GROUPS for name in group.params}


class GroupedCommand(AbbreviatingCommand):
    """The run command: its options listed by :data:`GROUPS` in ``--help``."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records: dict[str, tuple[str, str]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.name is not None:
                records[param.name] = record
        for group in GROUPS:
            rows = [records[name] for name in group.params if name in records]
            if rows:
                with formatter.section(f"{group.title} (gcurun help {group.topic})"):
                    formatter.write_dl(rows)

    def format_group(self, ctx: click.Context, group: Group) -> str:
        """One group's options alone, as ``--help`` shows them."""
        formatter = ctx.make_formatter()
        formatter.write_text(f"{group.title}: {group.summary}.")
        records = {p.name: p.get_help_record(ctx) for p in self.get_params(ctx)}
        rows = [r for r in (records.get(name) for name in group.params) if r is not None]
        with formatter.section("Options"):
            formatter.write_dl(rows)
        return formatter.getvalue()


EXIT_CODES = """\
Exit codes of gcurun:

  0      every rank exited with 0 (or --dry-run, --help, gcurun check succeeded)
  1      the launch failed: a host could not be reached, mpirun or srun could not start,
         a rank could not be started
  2      bad input: an option, a variable, a profile, a host spec or a hostfile; the message
         quotes the value, states the rule and says how to fix it
  N      a rank failed with exit code N: the first rank to fail is the root cause, and
         every other rank was stopped
  128+N  a rank (or gcurun itself) was ended by signal N: 130 after Ctrl-C (SIGINT),
         143 after SIGTERM, 137 after SIGKILL

Every message of gcurun starts with 'gcurun:'; bad input reads
'gcurun: error: ...', a failed job 'gcurun: job failed: ...'.
"""

PROFILES = """\
Profiles: a YAML file of settings for a cluster, given with --profile FILE or
GCURUN_PROFILE. Its keys are the settings' keys: top-level ones, and the sections ssh:,
mpi:, runtime: and elastic:. Each value may also be given by the command line (which wins)
or by a variable (below the profile); see gcurun help environment for every key.

  # two-nodes.yaml
  hosts: [node1:8, node2:8]         # or hostfile: hosts.txt
  accelerator: gcu
  bind_to: numa
  env:                               # set on every rank
    ECCL_DEBUG: WARN
  ssh:
    user: train
    identity_file: ~/.ssh/id_ed25519   # relative paths are relative to the profile
  mpi:
    network_interface: 10.0.0.0/24
  runtime:
    fusion_threshold_mb: 32

A host may be a mapping too: {name: node1, slots: 8, devices: [0, 1], user: u, port: 22}.
`gcurun --profile FILE --dry-run true` shows every setting with where it came from
(cli, profile:FILE:LINE, env:VARIABLE, default). Example profiles are in configs/.
"""


def environment_topic() -> str:
    """The naming rule and every setting's option, variable and profile key."""
    from gcurun.config.schema import KEYS, OLD_ENVIRON_NAMES

    lines = [
        "Environment variables.",
        "",
        "The rule: a setting's variable is GCURUN_ followed by its command-line option's",
        "name, upper-cased, with dashes as underscores: --ssh-port is GCURUN_SSH_PORT,",
        "--fusion-threshold-mb is GCURUN_FUSION_THRESHOLD_MB, -np is GCURUN_NP. The launcher",
        "reads them below the command line and a profile; the ranks read the runtime",
        "knobs' variables themselves, so a script started without gcurun (under mpirun,",
        "say) reads the same names. An empty variable counts as unset.",
        "",
        f"  {'option':<30} {'variable':<36} profile key",
    ]
    for key in KEYS:
        if key.environ_name is not None:
            lines.append(f"  {key.option:<30} {key.environ_name:<36} {key.path}")
    lines += [
        "",
        "Also read: GCURUN_PROFILE (as --profile) and GCURUN_LOG_LEVEL (as --log-level).",
        "Horovod's names are read below gcurun's: HOROVOD_FUSION_THRESHOLD (bytes),",
        "HOROVOD_CYCLE_TIME, HOROVOD_TIMELINE, HOROVOD_TIMELINE_MARK_CYCLES,",
        "HOROVOD_STALL_CHECK_TIME_SECONDS, HOROVOD_STALL_SHUTDOWN_TIME_SECONDS,",
        "HOROVOD_STALL_CHECK_DISABLE, HOROVOD_HIERARCHICAL_ALLREDUCE, HOROVOD_CACHE_CAPACITY,",
        "HOROVOD_GLOO_IFACE, HOROVOD_LOG_LEVEL, HOROVOD_START_TIMEOUT.",
        "",
        "Old names, still read with a notice to rename them:",
    ]
    for old, path in OLD_ENVIRON_NAMES.items():
        new = next(k.environ_name for k in KEYS if k.path == path)
        lines.append(f"  {old:<40} now {new}")
    lines += [
        "",
        "Every rank gets: GCURUN_RANK GCURUN_SIZE GCURUN_LOCAL_RANK GCURUN_LOCAL_SIZE",
        "GCURUN_CROSS_RANK GCURUN_CROSS_SIZE GCURUN_HOSTNAME, their HOROVOD_* twins, torch's",
        "RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT, and the",
        "accelerator's device variable (TOPS_VISIBLE_DEVICES for gcu).",
    ]
    return "\n".join(lines) + "\n"


TEXTS = {
    "environment": ("every setting's variable and the naming rule", environment_topic),
    "exit-codes": ("what gcurun's exit code says", lambda: EXIT_CODES),
    "profiles": ("YAML cluster profiles (--profile)", lambda: PROFILES),
}
SUBCOMMAND_TOPICS = {
    "run": "the options of a job (gcurun --help)",
    "check": "versions, MPI, NUMA nodes and devices of this host",
    "bench": "the allreduce benchmark",
    "timeline": "read an engine timeline",
}


def topics() -> list[tuple[str, str]]:
    """Every topic of ``gcurun help TOPIC`` with what it shows."""
    found = [(g.topic, g.summary) for g in GROUPS]
    found += [(name, summary) for name, (summary, _) in TEXTS.items()]
    found += list(SUBCOMMAND_TOPICS.items())
    return found


def topic_list() -> str:
    width = max(len(name) for name, _ in topics())
    lines = ["Topics (gcurun help TOPIC):"]
    lines += [f"  {name:<{width}}  {summary}" for name, summary in topics()]
    return "\n".join(lines) + "\n"


def topic_text(topic: str, command: click.Command) -> str | None:
    """The text of a group of ``command``'s options (the run command) or of a text topic;
    None for a subcommand or an unknown word."""
    if topic in TEXTS:
        return TEXTS[topic][1]()
    for group in GROUPS:
        if group.topic == topic and isinstance(command, GroupedCommand):
            return command.format_group(click.Context(command, info_name="gcurun"), group)
    return None
