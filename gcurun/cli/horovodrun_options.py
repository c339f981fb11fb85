"""horovodrun's spellings that gcurun has no option of its own for, and what each means here.

horovodrun 0.28.1's command line runs under ``gcurun`` with the same meaning. Options that
name a gcurun setting map onto it (``--start-timeout`` -> ``ssh.timeout``,
``--output-filename`` -> ``output_dir``, ``--gloo-timeout-seconds`` ->
``runtime.timeout_seconds`` ...); options for software that is absent here (NCCL streams,
the NCCL torus, jsrun) are accepted and answered with one notice of what they do under
gcurun. ``--config-file`` reads horovodrun's YAML of parameters; the command line wins over
it, as in horovodrun. The ``--autotune*`` options are gcurun's own (:mod:`gcurun.cli.run`);
the config file's ``autotune`` section sets them.

:func:`horovodrun_options` attaches the options to the run command;
:func:`apply_horovodrun_options` turns what was given into settings (dotted keys, as the
run command's other options) and notices.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import click

from gcurun.errors import UsageError

LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL")
LOG_LEVEL_VARIABLE = "GCURUN_LOG_LEVEL"
# The variable that carries --cache-capacity to the ranks (read by gcurun.runtime.settings).
CACHE_CAPACITY_VARIABLE = "GCURUN_CACHE_CAPACITY"


def _check_build(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``-cb``: horovodrun shows what Horovod was built with; gcurun shows this host's
    versions, MPI and devices (``gcurun check``) and exits."""
    if not value or ctx.resilient_parsing:
        return
    from gcurun.cli.check import check

    check.main([], prog_name="gcurun check", standalone_mode=False)
    ctx.exit(0)


def _options() -> list[Callable[[Any], Any]]:
    return [
        click.option("-cb", "--check-build", is_flag=True, expose_value=False, is_eager=True,
                     callback=_check_build,
                     help="horovodrun: show this host's versions, MPI and devices "
                          "(as gcurun check) and exit."),
        click.option("--disable-cache", is_flag=True, default=None,
                     help="horovodrun: accepted; gcurun checks the hosts on every run."),
        click.option("--start-timeout", type=float, metavar="S",
                     help="horovodrun: as --ssh-timeout."),
        click.option("--network-interfaces", metavar="NICS",
                     help="horovodrun: as --network-interface (the first of a list)."),
        click.option("--output-filename", metavar="DIR", help="horovodrun: as --output-dir."),
        click.option("--verbose", is_flag=True, default=None,
                     help="Say what the launcher decides and does (as --log-level info)."),
        click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False),
                     help="Launcher messages of this level and above on stderr (default "
                          "warning; also GCURUN_LOG_LEVEL); ranks get GCURUN_LOG_LEVEL."),
        click.option("--log-with-timestamp/--log-without-timestamp", "log_with_timestamp",
                     default=None, help="Timestamp the launcher's messages (default: no)."),
        click.option("--log-hide-timestamp", "log_hide_timestamp", is_flag=True,
                     default=None, hidden=True),
        click.option("--no-log-hide-timestamp", "log_show_timestamp", is_flag=True,
                     default=None, hidden=True),
        click.option("-prefix-timestamp", "--prefix-output-with-timestamp",
                     "prefix_output_with_timestamp", is_flag=True, default=None,
                     help="Timestamp each line of the ranks' output."),
        click.option("--config-file", type=click.Path(dir_okay=False), metavar="FILE",
                     help="horovodrun's YAML of parameters; the command line wins over it."),
        click.option("--cache-capacity", type=click.IntRange(min=0), metavar="N",
                     help="Tensor names the negotiation caches (default 1024; 0 disables)."),
        click.option("--hierarchical-allgather/--no-hierarchical-allgather", default=None,
                     help="horovodrun: accepted; gcurun's allgather is one ring."),
        click.option("--torus-allreduce/--no-torus-allreduce", default=None,
                     help="horovodrun: NCCL's torus; accepted, absent here."),
        click.option("--stall-check/--no-stall-check", "stall_check", default=None,
                     help="Warn about stalled tensors (default) / never."),
        click.option("--stall-check-warning-time-seconds", type=click.FloatRange(min=0),
                     metavar="S", help="horovodrun: as --stall-check-warning-seconds."),
        click.option("--stall-check-shutdown-time-seconds", type=click.FloatRange(min=0),
                     metavar="S", help="horovodrun: as --stall-check-shutdown-seconds."),
        click.option("--mpi-threads-disable/--no-mpi-threads-disable", default=None,
                     help="horovodrun: accepted; gcurun's engine needs MPI threads."),
        click.option("--tcp", "tcp_flag", is_flag=True, default=None,
                     help="horovodrun: accepted; gcurun's own ranks use TCP already."),
        click.option("--binding-args", metavar="ARGS",
                     help="horovodrun: mpirun binding arguments, appended as --mpi-args."),
        click.option("--num-nccl-streams", type=click.IntRange(min=0), metavar="N",
                     help="horovodrun: accepted; gcurun uses no NCCL."),
        click.option("--thread-affinity", type=click.IntRange(min=0), metavar="CPU",
                     help="horovodrun: accepted; the engine thread keeps the rank's "
                          "binding (--bind-to)."),
        click.option("--gloo-timeout-seconds", type=click.FloatRange(min=0, min_open=True),
                     metavar="S", help="horovodrun: the ranks' collective timeout "
                                       "(GCURUN_TIMEOUT_SECONDS, default 300)."),
        click.option("--gloo", "use_gloo", is_flag=True, default=None,
                     help="horovodrun: gcurun's own launcher and tcp runtime (the default)."),
        click.option("--jsrun", "use_jsrun", is_flag=True, default=None,
                     help="horovodrun: LSF's jsrun is absent here; starts ranks with "
                          "mpirun (as --mpi)."),
    ]


def horovodrun_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Attach horovodrun's options to a click command (a decorator)."""
    for opt in reversed(_options()):
        func = opt(func)
    return func


class AbbreviatingCommand(click.Command):
    """A click command that takes unique prefixes of its long options, as horovodrun's
    argparse does (``--fusion-thr 32`` is ``--fusion-threshold-mb 32``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, expand_abbreviations(self.params, args))


def expand_abbreviations(params: list[click.Parameter], args: list[str]) -> list[str]:
    """``args`` with every unique prefix of a ``--long`` option written in full, up to the
    command (the first argument that is not an option or an option's value). Raises
    click.UsageError for a prefix of several options."""
    takes: dict[str, int] = {}
    for param in params:
        if isinstance(param, click.Option):
            count = 0 if param.is_flag or param.count else param.nargs
            for name in (*param.opts, *param.secondary_opts):
                takes[name] = count
    out: list[str] = []
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] not in ("-", "--"):
        name, eq, value = args[i].partition("=")
        if name.startswith("--") and name not in takes:
            matches = sorted(o for o in takes if o.startswith(name))
            if len(matches) > 1:
                raise click.UsageError(f"option '{name}' is ambiguous: it may be "
                                       f"{', '.join(matches)}; write it in full")
            if matches:
                name = matches[0]
        out.append(name + eq + value)
        values = 0 if eq else takes.get(name, 0)
        out.extend(args[i + 1:i + 1 + values])
        i += 1 + values
    return out + args[i:]


@dataclass
class Compat:
    """What horovodrun's options gave: settings by dotted key, notices for the user, the
    launcher's log level and whether its messages carry timestamps."""

    settings: dict[str, Any] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    log_level: str | None = None
    log_timestamps: bool = False


# horovodrun's --config-file sections: (section, key) -> the CLI parameter it sets.
CONFIG_KEYS: dict[tuple[str, str], str] = {
    ("params", "fusion_threshold_mb"): "fusion_threshold_mb",
    ("params", "cycle_time_ms"): "cycle_time_ms",
    ("params", "cache_capacity"): "cache_capacity",
    ("params", "hierarchical_allreduce"): "hierarchical_allreduce",
    ("params", "hierarchical_allgather"): "hierarchical_allgather",
    ("params", "torus_allreduce"): "torus_allreduce",
    ("timeline", "filename"): "timeline_filename",
    ("timeline", "mark_cycles"): "timeline_mark_cycles",
    ("stall_check", "warning_time_seconds"): "stall_check_warning_time_seconds",
    ("stall_check", "shutdown_time_seconds"): "stall_check_shutdown_time_seconds",
    ("library_options", "mpi_threads_disable"): "mpi_threads_disable",
    ("library_options", "num_nccl_streams"): "num_nccl_streams",
    ("library_options", "thread_affinity"): "thread_affinity",
    ("library_options", "gloo_timeout_seconds"): "gloo_timeout_seconds",
    ("logging", "level"): "log_level",
    ("logging", "with_timestamp"): "log_with_timestamp",
    ("autotune", "enabled"): "autotune",
    ("autotune", "log_file"): "autotune_log_file",
    ("autotune", "warmup_samples"): "autotune_warmup_samples",
    ("autotune", "steps_per_sample"): "autotune_steps_per_sample",
    ("autotune", "bayes_opt_max_samples"): "autotune_bayes_opt_max_samples",
    ("autotune", "gaussian_process_noise"): "autotune_gaussian_process_noise",
}
_CONFIG_SECTIONS = ("params", "autotune", "timeline", "stall_check", "library_options",
                    "logging", "controller")
_NUMBERS = frozenset({"fusion_threshold_mb", "cycle_time_ms", "cache_capacity",
                      "stall_check_warning_time_seconds", "stall_check_shutdown_time_seconds",
                      "num_nccl_streams", "thread_affinity", "gloo_timeout_seconds",
                      "autotune_gaussian_process_noise"})
# Whole numbers (kept as int).
_INTS = frozenset({"autotune_warmup_samples", "autotune_steps_per_sample",
                   "autotune_bayes_opt_max_samples"})
_FLAGS = frozenset({"hierarchical_allreduce", "hierarchical_allgather", "torus_allreduce",
                    "timeline_mark_cycles", "mpi_threads_disable", "log_with_timestamp",
                    "autotune"})


def read_config_file(path: str) -> dict[str, Any]:
    """The CLI parameters horovodrun's ``--config-file`` sets (its own names). Raises
    UsageError for a file that cannot be read, is not YAML, or holds unknown keys."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise UsageError(f"--config-file '{path}': {exc.strerror}; give horovodrun's YAML "
                         "file of parameters") from None
    return parse_config_file(text, path)


def parse_config_file(text: str, source: str) -> dict[str, Any]:
    """horovodrun's YAML config -> CLI parameter names and values (pure)."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"--config-file '{source}': not valid YAML ({exc}); check its "
                         "indentation and quoting") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"--config-file '{source}': not a mapping of sections; write "
                         f"sections such as params: and timeline: ({', '.join(_CONFIG_SECTIONS)})")
    given: dict[str, Any] = {}
    for section, body in data.items():
        if section not in _CONFIG_SECTIONS:
            raise UsageError(f"--config-file '{source}': unknown section '{section}'; "
                             f"horovodrun's sections are {', '.join(_CONFIG_SECTIONS)}")
        if section == "controller":
            if str(body).lower() not in ("gloo", "mpi"):
                raise UsageError(f"--config-file '{source}': controller '{body}' is neither "
                                 "gloo nor mpi; write controller: gloo or controller: mpi")
            given["use_mpi" if str(body).lower() == "mpi" else "use_gloo"] = True
            continue
        if not isinstance(body, dict):
            raise UsageError(f"--config-file '{source}': section '{section}' is not a "
                             "mapping; write its keys indented under it")
        for key, value in body.items():
            _config_value(source, section, str(key), value, given)
    return given


def _config_value(source: str, section: str, key: str, value: Any,
                  given: dict[str, Any]) -> None:
    where = f"--config-file '{source}': {section}.{key}"
    if section == "stall_check" and key == "enabled":
        if not isinstance(value, bool):
            raise UsageError(f"{where} = {value!r}: write true or false")
        given["stall_check"] = value
        return
    name = CONFIG_KEYS.get((section, key))
    if name is None:
        known = sorted(k for s, k in CONFIG_KEYS if s == section)
        raise UsageError(f"{where} is not a horovodrun key; {section}'s keys are "
                         f"{', '.join(known) if known else 'enabled'}")
    if name in _FLAGS and not isinstance(value, bool):
        raise UsageError(f"{where} = {value!r}: write true or false")
    if name in _NUMBERS and (isinstance(value, bool) or not isinstance(value, (int, float))
                             or value < 0):
        raise UsageError(f"{where} = {value!r}: write a number of at least 0")
    if name in _INTS and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise UsageError(f"{where} = {value!r}: write a whole number of at least 0")
    if name == "autotune_log_file" and not isinstance(value, str):
        raise UsageError(f"{where} = {value!r}: write a file name")
    if name == "log_level" and str(value).upper() not in LOG_LEVELS:
        raise UsageError(f"{where} = {value!r}: write one of {', '.join(LOG_LEVELS)}")
    if name == "timeline_filename" and not isinstance(value, str):
        raise UsageError(f"{where} = {value!r}: write a file name")
    given[name] = value


def apply_horovodrun_options(given: Mapping[str, Any], cli: MutableMapping[str, Any],
                             environ: Mapping[str, str]) -> Compat:
    """Turn the horovodrun options of ``given`` (the parameters given on the command line,
    by click name) into settings added to ``cli`` (dotted keys), notices and logging.
    ``--config-file`` fills what the command line left out. Raises UsageError when two
    spellings of one setting on the command line disagree or a config file is bad."""
    out = Compat()
    from_file: dict[str, Any] = {}
    if given.get("config_file"):
        from_file = {k: v for k, v in read_config_file(given["config_file"]).items()
                     if k not in given}
        if any(given.get(k) for k in ("use_gloo", "use_mpi", "use_jsrun", "use_slurm",
                                      "launcher")):
            # the command line chose how ranks start: the file's controller is overridden
            from_file.pop("use_gloo", None)
            from_file.pop("use_mpi", None)
    _apply_settings(given, cli, out)
    if from_file:
        _apply_file(from_file, cli, out)
    params = {**from_file, **given}
    _apply_notices(params, cli, out)
    _apply_logging(params, environ, out, cli)
    return out


# gcurun's own options that a config file may set where the command line did not.
_CORE_FROM_CONFIG = {
    "fusion_threshold_mb": "runtime.fusion_threshold_mb",
    "cycle_time_ms": "runtime.cycle_time_ms",
    "timeline_filename": "runtime.timeline",
    "timeline_mark_cycles": "runtime.timeline_mark_cycles",
    "hierarchical_allreduce": "runtime.hierarchical_allreduce",
    "autotune": "runtime.autotune",
    "autotune_log_file": "runtime.autotune_log_file",
    "autotune_warmup_samples": "runtime.autotune_warmup_samples",
    "autotune_steps_per_sample": "runtime.autotune_steps_per_sample",
    "autotune_bayes_opt_max_samples": "runtime.autotune_bayes_opt_max_samples",
    "autotune_gaussian_process_noise": "runtime.autotune_gaussian_process_noise",
}


def _apply_file(from_file: Mapping[str, Any], cli: MutableMapping[str, Any],
                out: Compat) -> None:
    """The settings of the config file's values, below every setting the command line
    gave (horovodrun's rule)."""
    extra: dict[str, Any] = {}
    _apply_settings(from_file, extra, out)
    for name, key in _CORE_FROM_CONFIG.items():
        if name in from_file:
            value = from_file[name]
            extra[key] = float(value) if name in _NUMBERS else value
    if from_file.get("use_mpi"):
        extra["launcher"] = "mpi"
    for key, value in extra.items():
        if key == "env":
            cli["env"] = {**value, **cli.get("env", {})}
        elif key not in cli:
            cli[key] = value


def _same(cli: MutableMapping[str, Any], key: str, value: Any, spelling: str,
          other: str) -> None:
    """Set ``key``, unless gcurun's own spelling gave it another value."""
    if key in cli and cli[key] != value:
        raise UsageError(f"{spelling} {value} and {other} {cli[key]} set the same thing "
                         f"differently; give one of them")
    cli[key] = value


def _apply_settings(p: Mapping[str, Any], cli: MutableMapping[str, Any],
                    out: Compat) -> None:
    if p.get("start_timeout") is not None:
        if not p["start_timeout"] > 0:
            raise UsageError(f"--start-timeout {p['start_timeout']}: give seconds above 0")
        _same(cli, "ssh.timeout", float(p["start_timeout"]), "--start-timeout",
              "--ssh-timeout")
    if p.get("network_interfaces") is not None:
        nics = [n.strip() for n in p["network_interfaces"].split(",") if n.strip()]
        if not nics:
            raise UsageError(f"--network-interfaces '{p['network_interfaces']}': no "
                             "interface named; write --network-interfaces eth0")
        _same(cli, "mpi.network_interface", nics[0], "--network-interfaces",
              "--network-interface")
        if len(nics) > 1:
            out.notices.append(f"--network-interfaces {p['network_interfaces']}: gcurun "
                               f"uses one network between hosts: {nics[0]}")
    if p.get("output_filename") is not None:
        _same(cli, "output_dir", p["output_filename"], "--output-filename", "--output-dir")
    for name, key, own in (
            ("stall_check_warning_time_seconds", "runtime.stall_check_warning_seconds",
             "--stall-check-warning-seconds"),
            ("stall_check_shutdown_time_seconds", "runtime.stall_check_shutdown_seconds",
             "--stall-check-shutdown-seconds")):
        if p.get(name) is not None:
            _same(cli, key, float(p[name]), "--" + name.replace("_", "-"), own)
    if p.get("stall_check") is False:
        # horovodrun's --no-stall-check turns the inspector off: no warning, no shutdown.
        cli["runtime.stall_check_warning_seconds"] = 0.0
        cli["runtime.stall_check_shutdown_seconds"] = 0.0
    if p.get("gloo_timeout_seconds") is not None:
        cli["runtime.timeout_seconds"] = float(p["gloo_timeout_seconds"])
    if p.get("cache_capacity") is not None:
        env = dict(cli.get("env", {}))
        env.setdefault(CACHE_CAPACITY_VARIABLE, str(int(p["cache_capacity"])))
        cli["env"] = env
    _apply_controller(p, cli, out)
    if p.get("binding_args"):
        cli["mpi.args"] = (*cli.get("mpi.args", ()),
                           *split_args(p["binding_args"], "--binding-args"))


def split_args(text: str, option: str) -> tuple[str, ...]:
    """``--mpi-args`` / ``--binding-args`` text split shell-style. Raises UsageError for
    an unclosed quote or a trailing backslash."""
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise UsageError(f"{option} '{text}': {str(exc).lower()}; quote the arguments as "
                         f"a shell would: {option} '--mca btl_tcp_if_include eth0'") from None


def _apply_controller(p: Mapping[str, Any], cli: MutableMapping[str, Any],
                      out: Compat) -> None:
    from gcurun.launch.kinds import own_launcher

    launcher = cli.get("launcher")
    if p.get("use_gloo"):
        if not own_launcher(launcher):
            given_as = "--mpi" if p.get("use_mpi") else f"--launcher {launcher}"
            raise UsageError(f"--gloo (gcurun's own launcher and tcp runtime) conflicts "
                             f"with {given_as}; give one")
    if p.get("use_jsrun"):
        if launcher not in (None, "mpi"):
            raise UsageError(f"--jsrun conflicts with --launcher {launcher}; give one")
        if p.get("use_gloo"):
            raise UsageError("--jsrun conflicts with --gloo; give one")
        cli["launcher"] = "mpi"
        out.notices.append("--jsrun: LSF's jsrun is not supported; the ranks start with "
                           "mpirun (as --mpi)")


# (parameter, value that needs a notice, the notice)
_ABSENT: tuple[tuple[str, Any, str], ...] = (
    ("disable_cache", True, "--disable-cache: gcurun keeps no cache of host checks; it "
                            "checks the hosts on every run"),
    ("hierarchical_allgather", True, "--hierarchical-allgather: gcurun has no hierarchical "
                                     "allgather; allgather runs as one ring"),
    ("torus_allreduce", True, "--torus-allreduce: NCCL's torus allreduce is absent here; "
                              "use --hierarchical-allreduce for a two-level allreduce"),
    ("mpi_threads_disable", True, "--mpi-threads-disable: gcurun's engine thread makes the "
                                  "MPI calls, so MPI keeps its thread support"),
    ("tcp_flag", True, "--tcp: gcurun's own ranks talk over TCP already; under --mpi, "
                       "mpirun picks its transports (choose them with --mpi-args)"),
    ("num_nccl_streams", None, "--num-nccl-streams: gcurun uses no NCCL; ignored"),
    ("thread_affinity", None, "--thread-affinity: ignored; gcurun's engine thread runs on "
                              "the rank's CPUs (set them with --bind-to)"),
)


def _apply_notices(p: Mapping[str, Any], cli: Mapping[str, Any], out: Compat) -> None:
    for name, value, notice in _ABSENT:
        given = p.get(name)
        if given is not None and (value is None or given == value):
            out.notices.append(notice)
    if p.get("binding_args") and cli.get("launcher") != "mpi":
        out.notices.append("--binding-args: they go to mpirun, and this job does not use "
                           "mpirun (add --mpi); ignored")


def _apply_logging(p: Mapping[str, Any], environ: Mapping[str, str], out: Compat,
                   cli: MutableMapping[str, Any]) -> None:
    level = p.get("log_level")
    if level is None and p.get("verbose"):
        level = "INFO"
    if level is None and environ.get(LOG_LEVEL_VARIABLE, "").strip():
        level = environ[LOG_LEVEL_VARIABLE].strip()
        if level.upper() not in LOG_LEVELS:
            raise UsageError(f"{LOG_LEVEL_VARIABLE}={level}: not a log level; write one of "
                             f"{', '.join(LOG_LEVELS)}")
    if level is not None:
        out.log_level = level.upper()
        if p.get("log_level") is not None:
            env = dict(cli.get("env", {}))
            env.setdefault(LOG_LEVEL_VARIABLE, out.log_level)
            cli["env"] = env
    stamp = p.get("log_with_timestamp")
    if p.get("log_hide_timestamp"):
        stamp = False
    if p.get("log_show_timestamp"):
        stamp = True
    out.log_timestamps = bool(stamp)


def print_notices(notices: list[str], stream: Any = None) -> None:
    """One line per notice on stderr: ``gcurun: note: ...``."""
    stream = stream or sys.stderr
    for notice in notices:
        stream.write(f"gcurun: note: {notice}\n")
