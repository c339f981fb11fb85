"""The one place where CLI, profile, environment and defaults become :class:`Settings`.

Precedence, per dotted key: CLI > profile > ``GCURUN_*`` environment > defaults. The
environment layer also reads Horovod's names for the runtime knobs (``HOROVOD_CYCLE_TIME``
...), below the ``GCURUN_*`` ones. ``Settings.sources`` records the winner of every key as
``cli``, ``profile:<file>:<line>``, ``env:<VAR>``, an allocation's label (``slurm``,
``gridengine:PE_HOSTFILE``, ``lsf:LSB_MCPU_HOSTS``, ``mpi-operator:/etc/mpi/hostfile``)
or ``default``.

Inside an allocation (a Slurm ``salloc`` or ``sbatch`` script, a Grid Engine parallel job,
an LSF job, an MPI Operator launcher pod; :mod:`gcurun.hosts.allocation` asks them in
order) where no layer names hosts, the allocation does: its hosts with their task counts
as slots, and ``np`` (unless a layer gives it) its task count, both with the allocation's
label. A process of an srun step (gcurun run by srun) cannot know the allocation's layout
and is refused.

Three keys combine layers instead of replacing them: ``env`` is merged per variable (each
``env.NAME`` has its own source), ``forward_env`` is the union of the profile's and the
CLI's names, and ``hosts``/``hostfile`` are one choice: the highest layer giving either
decides both, and a hostfile that wins is read into ``hosts`` (the only I/O here).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gcurun.config.api import (
    ElasticSettings,
    MPISettings,
    RuntimeSettings,
    Settings,
    SSHSettings,
)
from gcurun.config.schema import KEYS, KEYS_BY_PATH, MAX_FUSION_MB, OLD_ENVIRON_NAMES, Key
from gcurun.errors import HostSpecError, UsageError
from gcurun.hosts.api import HostSpec
from gcurun.hosts.hostfile import read_hostfile as _read_hostfile
from gcurun.hosts.hostlist import Problem
from gcurun.hosts.item import check_user_name
from gcurun.hosts.specs import parse_host_specs

if TYPE_CHECKING:  # the profile module imports yaml; runs without a profile skip it
    from gcurun.config.profile import Profile

PROFILE_VARIABLE = "GCURUN_PROFILE"

_BYTES_PER_MB = 1024 * 1024
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_COMBINED = frozenset({"hosts", "hostfile", "env", "forward_env"})


@dataclass(frozen=True)
class _Alias:
    """A Horovod variable read as a runtime knob, converted by ``scale``."""

    variable: str
    key: Key
    scale: float = 1.0


_HOROVOD: dict[str, _Alias] = {
    "runtime.fusion_threshold_mb": _Alias(
        "HOROVOD_FUSION_THRESHOLD",
        Key("runtime.fusion_threshold_mb", "int", low=0,
            high=MAX_FUSION_MB * _BYTES_PER_MB),
        1.0 / _BYTES_PER_MB),
    "runtime.cycle_time_ms": _Alias("HOROVOD_CYCLE_TIME", KEYS_BY_PATH["runtime.cycle_time_ms"]),
    "runtime.timeline": _Alias("HOROVOD_TIMELINE", KEYS_BY_PATH["runtime.timeline"]),
    "runtime.timeline_mark_cycles": _Alias(
        "HOROVOD_TIMELINE_MARK_CYCLES", KEYS_BY_PATH["runtime.timeline_mark_cycles"]),
    "runtime.stall_check_warning_seconds": _Alias(
        "HOROVOD_STALL_CHECK_TIME_SECONDS", KEYS_BY_PATH["runtime.stall_check_warning_seconds"]),
    "runtime.stall_check_shutdown_seconds": _Alias(
        "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
        KEYS_BY_PATH["runtime.stall_check_shutdown_seconds"]),
    "runtime.hierarchical_allreduce": _Alias(
        "HOROVOD_HIERARCHICAL_ALLREDUCE", KEYS_BY_PATH["runtime.hierarchical_allreduce"]),
    "runtime.autotune": _Alias("HOROVOD_AUTOTUNE", KEYS_BY_PATH["runtime.autotune"]),
    "runtime.autotune_log_file": _Alias("HOROVOD_AUTOTUNE_LOG",
                                        KEYS_BY_PATH["runtime.autotune_log_file"]),
    **{f"runtime.autotune_{name}": _Alias(f"HOROVOD_AUTOTUNE_{name.upper()}",
                                          KEYS_BY_PATH[f"runtime.autotune_{name}"])
       for name in ("warmup_samples", "steps_per_sample", "bayes_opt_max_samples",
                    "gaussian_process_noise")},
    # horovodrun's --start-timeout variable
    "ssh.timeout": _Alias("HOROVOD_START_TIMEOUT", KEYS_BY_PATH["ssh.timeout"]),
}


@dataclass(frozen=True)
class _Layer:
    """One source of values with the label each of its keys gets in ``Settings.sources``."""

    values: Mapping[str, Any]
    label: Callable[[str], str]


def profile_path_from(cli_value: str | None, environ: Mapping[str, str]) -> str | None:
    """The profile to load: ``--profile`` if given, else ``GCURUN_PROFILE``, else None."""
    if cli_value:
        return cli_value
    return environ.get(PROFILE_VARIABLE) or None


def load_settings(cli: Mapping[str, Any], profile: str | None,
                  environ: Mapping[str, str]) -> Settings:
    """The settings of one launch: ``cli`` (dotted keys, as for :func:`resolve_settings`)
    over the profile (``profile``, else ``GCURUN_PROFILE``; read here) over ``environ``.
    Raises ProfileError or UsageError."""
    path = profile_path_from(profile, environ)
    loaded = None
    if path:
        from gcurun.config.profile import read_profile

        loaded = read_profile(path)
    return resolve_settings(cli, loaded, environ)


HostfileReader = Callable[[str], tuple[HostSpec, ...]]


def resolve_settings(cli: Mapping[str, Any], profile: Profile | None,
                     environ: Mapping[str, str], *,
                     read_hostfile: HostfileReader = _read_hostfile) -> Settings:
    """Merge the layers into Settings, recording every key's source.

    ``cli`` holds only the values the user gave, by dotted key (``hosts`` already parsed
    into HostSpec records). When the winning host setting is a hostfile (from the profile,
    ``GCURUN_HOSTFILE`` or a ``hostfile`` CLI key), it is read with ``read_hostfile`` and
    ``hosts`` holds its hosts. Raises UsageError for a bad ``GCURUN_*``/``HOROVOD_*`` value
    (naming the variable), for hosts and a hostfile given together in one layer and for a
    hostfile that cannot be read or parsed, for malformed Slurm variables and for a
    process of an srun step without hosts given; ValueError for a ``cli`` key that is not a
    setting (a bug in the caller).
    """
    cli_values = _normalise_cli(cli)
    env_values, env_names = read_environment(environ)
    layers = (
        _Layer(cli_values, lambda key: "cli"),
        _Layer(profile.values, profile.origin) if profile else _Layer({}, str),
        _Layer(env_values, lambda key: f"env:{env_names[key]}"),
    )
    chosen: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key in KEYS:
        if key.path in _COMBINED:
            continue
        layer = next((layer for layer in layers if key.path in layer.values), None)
        if layer is None:
            sources[key.path] = "default"
        else:
            chosen[key.path] = layer.values[key.path]
            sources[key.path] = layer.label(key.path)
    _choose_hosts(layers, chosen, sources)
    if sources["hosts"] == "default":
        _hosts_from_allocation(environ, chosen, sources)
    if chosen.get("hostfile") is not None and chosen.get("hosts") is None:
        chosen["hosts"] = _hosts_from_file(chosen["hostfile"], sources["hostfile"],
                                           read_hostfile)
    _merge_env(layers, chosen, sources)
    _merge_forward_env(layers, chosen, sources)
    _check_elastic(chosen, sources)
    return _build(chosen, sources)


def read_environment(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The settings the environment gives, and the variable each one was read from.

    ``GCURUN_<OPTION>`` wins over a key's old name (``OLD_ENVIRON_NAMES``), which wins over
    the Horovod name of a runtime knob. An empty variable counts as unset. Raises UsageError
    naming the variable whose value is bad.
    """
    values: dict[str, Any] = {}
    names: dict[str, str] = {}
    for key in KEYS:
        candidates = [(key.environ_name, key, 1.0)] if key.environ_name else []
        candidates += [(old, key, 1.0) for old, path in OLD_ENVIRON_NAMES.items()
                       if path == key.path]
        alias = _HOROVOD.get(key.path)
        if alias is not None:
            candidates.append((alias.variable, alias.key, alias.scale))
        for variable, parse_key, scale in candidates:
            text = environ.get(variable, "")
            if text.strip():
                value = _parse_variable(variable, text, parse_key)
                values[key.path] = value * scale if scale != 1.0 else value
                names[key.path] = variable
                break
    if "hosts" in values and "hostfile" in values:
        raise UsageError(f"both {names['hosts']} and {names['hostfile']} are set; unset one "
                         "of them")
    return values, names


def runtime_environment(runtime: RuntimeSettings,
                        sources: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``GCURUN_*`` variables that carry the runtime knobs into every rank: with
    ``sources`` (``Settings.sources``), only the knobs the command line or a profile set,
    so a knob set in the launcher's environment (``HOROVOD_STALL_CHECK_DISABLE=1``,
    ``HOROVOD_CYCLE_TIME``) reaches the ranks as it was given, and the ranks' own
    defaults apply to the rest."""
    env: dict[str, str] = {}
    for key in KEYS:
        if key.section != "runtime" or key.environ_name is None:
            continue
        if sources is not None and not _explicit(sources.get(key.path, "default")):
            continue
        value = getattr(runtime, key.name)
        if value is not None:
            env[key.environ_name] = _variable_text(value)
    return env


def _explicit(source: str) -> bool:
    """Whether a setting's source is the command line or a profile."""
    return source == "cli" or source.startswith("profile")


def setting_name(path: str, source: str) -> str:
    """How a message names a setting given by ``source``: its option (``--max-np``), its
    variable (``GCURUN_MAX_NP``) or its profile key and line
    (``p.yaml:3: elastic.max_np``)."""
    if source.startswith("env:"):
        return source[4:]
    if source.startswith("profile:"):
        return f"{source[8:]}: {path}"
    return KEYS_BY_PATH[path].option


def explain_settings(settings: Settings) -> tuple[tuple[str, Any, str], ...]:
    """(dotted key, value, source) for every setting, in a stable order, for --dry-run;
    the ``elastic.*`` settings only for an elastic job."""
    rows: list[tuple[str, Any, str]] = []
    for key in KEYS:
        if key.section == "elastic" and not settings.elastic.enabled:
            continue
        section, _, name = key.path.rpartition(".")
        value = getattr(getattr(settings, section) if section else settings, name)
        rows.append((key.path, value, settings.sources.get(key.path, "default")))
        if key.path == "env":
            rows.extend((f"env.{var}", text, settings.sources.get(f"env.{var}", "default"))
                        for var, text in value.items())
    return tuple(rows)


def _parse_variable(variable: str, text: str, key: Key) -> Any:
    """One environment value, converted to the key's kind, or a UsageError."""
    try:
        value = _ENV_PARSERS[key.kind](text.strip(), key)
    except HostSpecError as exc:
        raise UsageError(f"{variable}={text!r}: {exc}") from None
    except Problem as exc:
        raise UsageError(f"{variable}={text!r}: {exc}; fix the value or unset {variable}") \
            from None
    except ValueError:
        raise UsageError(f"{variable}={text!r}: expected {key.expected()}; fix the value or "
                         f"unset {variable}") from None
    if key.kind in ("int", "float") and not key.in_range(value):
        raise UsageError(f"{variable}={text!r}: expected {key.expected()}; fix the value or "
                         f"unset {variable}")
    return value


def _env_bool(text: str, key: Key) -> bool:
    word = text.lower()
    if word in _TRUE | _FALSE:
        return word in _TRUE
    raise ValueError(text)


def _env_float(text: str, key: Key) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def _env_choice(text: str, key: Key) -> str:
    if text.lower() not in key.choices:
        raise ValueError(text)
    return text.lower()


def _env_pair(text: str, key: Key) -> tuple[int, int]:
    low, high = (int(part) for part in text.replace(",", " ").split())
    if not (key.in_range(low) and key.in_range(high)) or low > high:
        raise ValueError(text)
    return low, high


def _env_words(text: str, key: Key) -> tuple[str, ...]:
    words = tuple(word.strip() for word in text.split(","))
    if not all(words):
        raise ValueError(text)
    return words


_ENV_PARSERS: dict[str, Callable[[str, Key], Any]] = {
    "int": lambda text, key: int(text),
    "float": _env_float,
    "bool": _env_bool,
    "str": lambda text, key: text,
    "user": lambda text, key: check_user_name(text),
    "path": lambda text, key: text,
    "choice": _env_choice,
    "devices": _env_words,
    "args": lambda text, key: tuple(shlex.split(text)),
    "hosts": lambda text, key: parse_host_specs(text),
    "pair": _env_pair,
}


def _normalise_cli(cli: Mapping[str, Any]) -> dict[str, Any]:
    """The CLI's values with lists as tuples; the CLI has already checked their types."""
    unknown = sorted(set(cli) - set(KEYS_BY_PATH))
    if unknown:
        raise ValueError(f"not settings: {', '.join(unknown)}")
    values = dict(cli)
    for path, value in values.items():
        _check_cli_number(KEYS_BY_PATH[path], value)
        _check_cli_user(KEYS_BY_PATH[path], value)
    for path in ("hosts", "devices", "forward_env", "show_ranks",
                 "elastic.blacklist_cooldown_range"):
        if values.get(path) is not None:
            values[path] = tuple(values[path])
    if values.get("devices") is not None:
        values["devices"] = tuple(str(device) for device in values["devices"])
    if isinstance(values.get("mpi.args"), str):
        values["mpi.args"] = tuple(shlex.split(values["mpi.args"]))
    elif "mpi.args" in values:
        values["mpi.args"] = tuple(values["mpi.args"])
    if "env" in values:
        values["env"] = {str(name): str(text) for name, text in values["env"].items()}
    if "hosts" in values and "hostfile" in values:
        raise UsageError("hosts (-H) and a hostfile (--hostfile) were both given; give one")
    return values


def _check_cli_user(key: Key, value: Any) -> None:
    """Refuse a user name given on the command line that ``-H``'s USER@HOST would refuse,
    quoting the option and the value."""
    if key.kind != "user" or value is None:
        return
    try:
        check_user_name(str(value))
    except Problem as exc:
        raise UsageError(f"{key.option} '{value}': {exc}") from None


def _check_cli_number(key: Key, value: Any) -> None:
    """Refuse a number given on the command line that the key does not accept (NaN,
    infinities and values out of range), quoting the option and the value."""
    if key.kind not in ("int", "float") or value is None or isinstance(value, bool):
        return
    if not key.in_range(value):
        raise UsageError(f"{key.option} {_variable_text(value)}: expected {key.expected()}; "
                         f"give {key.option} a value in that range")


def _choose_hosts(layers: Iterable[_Layer], chosen: dict[str, Any],
                  sources: dict[str, str]) -> None:
    for layer in layers:
        given = [path for path in ("hosts", "hostfile") if path in layer.values]
        if given:
            label = layer.label(given[0])
            for path in ("hosts", "hostfile"):
                chosen[path] = layer.values.get(path)
                sources[path] = layer.label(path) if path in given else label
            return
    sources["hosts"] = sources["hostfile"] = "default"


def _hosts_from_allocation(environ: Mapping[str, str], chosen: dict[str, Any],
                           sources: dict[str, str]) -> None:
    """The hosts (and task count, when no layer set ``np``) of the allocation gcurun runs
    in, the first of :data:`gcurun.hosts.allocation.SOURCES` that recognises ``environ``;
    for an elastic job without a discovery script, the allocation's script; and the
    host-key policy its hosts need, when no layer set one. Raises HostSpecError for a
    malformed allocation and inside a Slurm step."""
    from gcurun.hosts.allocation import find_allocation

    allocation = find_allocation(environ)
    if allocation is None:
        return
    label = allocation.label
    chosen["hosts"] = allocation.hosts
    sources["hosts"] = label
    if "np" not in chosen:
        chosen["np"] = allocation.num_tasks
        sources["np"] = label
    elastic = chosen.get("elastic.min_np") is not None
    if elastic and allocation.discovery_script and \
            not chosen.get("elastic.host_discovery_script"):
        chosen["elastic.host_discovery_script"] = allocation.discovery_script
        sources["elastic.host_discovery_script"] = allocation.source
        if allocation.slots_per_host and chosen.get("elastic.slots") is None:
            chosen["elastic.slots"] = allocation.slots_per_host
            sources["elastic.slots"] = allocation.source
    if allocation.host_key_policy and "ssh.host_key_policy" not in chosen:
        chosen["ssh.host_key_policy"] = allocation.host_key_policy
        sources["ssh.host_key_policy"] = allocation.source


def _hosts_from_file(path: str, source: str,
                    read_hostfile: HostfileReader) -> tuple[HostSpec, ...]:
    try:
        return tuple(read_hostfile(path))
    except HostSpecError as exc:
        where = "--hostfile" if source == "cli" else source.partition(":")[2]
        raise HostSpecError(f"{where}: {exc}") from None


def _merge_env(layers: tuple[_Layer, ...], chosen: dict[str, Any],
               sources: dict[str, str]) -> None:
    env: dict[str, str] = {}
    sources["env"] = "default"
    for layer in reversed(layers):           # lowest first, so higher layers overwrite
        given = layer.values.get("env") or {}
        for name, text in given.items():
            env[name] = text
            sources[f"env.{name}"] = layer.label(f"env.{name}")
        if given:
            sources["env"] = layer.label("env")
    chosen["env"] = env


def _merge_forward_env(layers: tuple[_Layer, ...], chosen: dict[str, Any],
                       sources: dict[str, str]) -> None:
    names: dict[str, None] = {}
    sources["forward_env"] = "default"
    for layer in reversed(layers):
        given = layer.values.get("forward_env") or ()
        names.update(dict.fromkeys(given))
        if given:
            sources["forward_env"] = layer.label("forward_env")
    chosen["forward_env"] = tuple(names)


def _check_elastic(chosen: dict[str, Any], sources: dict[str, str]) -> None:
    """Refuse elastic options given on the command line for a job that is not elastic
    (Horovod's rule: a job is elastic when a minimum of ranks or a discovery script is
    given). A profile's or the environment's elastic settings serve elastic jobs only, as
    the ``mpi`` section serves mpirun jobs: a static job (min = max) leaves them unused,
    and its sources leave out the ``elastic.*`` keys."""
    if chosen.get("elastic.min_np") is not None or chosen.get("elastic.host_discovery_script"):
        return
    for key in KEYS:
        if key.section != "elastic":
            continue
        source = sources.pop(key.path)
        if source == "cli" and chosen.get(key.path) is not None:
            raise UsageError(f"{key.option} applies to elastic jobs; add --min-np or "
                             "--host-discovery-script")
        chosen.pop(key.path, None)


def _build(chosen: Mapping[str, Any], sources: Mapping[str, str]) -> Settings:
    """Settings from the chosen values; keys not chosen keep the dataclass defaults."""
    def section(name: str) -> dict[str, Any]:
        return {path.partition(".")[2]: value for path, value in chosen.items()
                if path.startswith(name + ".")}
    top = {path: value for path, value in chosen.items() if "." not in path}
    order = {key.path: index for index, key in enumerate(KEYS)}
    ordered = dict(sorted(sources.items(), key=lambda item: (
        order[item[0].split(".")[0] if item[0].startswith("env.") else item[0]], item[0])))
    return Settings(**top, ssh=SSHSettings(**section("ssh")), mpi=MPISettings(**section("mpi")),
                    runtime=RuntimeSettings(**section("runtime")),
                    elastic=ElasticSettings(**section("elastic")), sources=ordered)


def _variable_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
