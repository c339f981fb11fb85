"""The keys of :class:`gcurun.config.api.Settings`: their kinds, limits and where they may be set.

One table serves the profile loader, the environment reader and the resolver, so a key's type
and range are stated once. A key's path is its dotted name (``np``, ``ssh.port``,
``runtime.cycle_time_ms``), the same in the CLI mapping, the profile and ``Settings.sources``.

The one naming rule for environment variables: a key's variable is ``GCURUN_`` followed by
its command-line option's name, upper-cased, dashes as underscores (``--ssh-port`` ->
``GCURUN_SSH_PORT``, ``--network-interface`` -> ``GCURUN_NETWORK_INTERFACE``); a key
without an option of its own takes the name its option would have (``--backend``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from gcurun.config.api import Accelerator, BindTo, HorovodAlias, HostKeyPolicy, MapBy

Kind = Literal[
    "int",      # a whole number
    "float",    # any number
    "bool",     # true or false
    "str",      # text
    "user",     # a user name, by the rules of -H's USER@HOST
    "path",     # text naming a file; relative to the profile's folder when given in one
    "choice",   # one of Key.choices
    "devices",  # a list of device ids, kept as strings
    "names",    # a list of environment variable names
    "env",      # a mapping of variable name to value
    "hosts",    # a list of hosts, -H strings or mappings
    "args",     # a list of command-line arguments, or one string split shell-style
    "ranks",    # a list of rank numbers (CLI only)
    "pair",     # two whole numbers MIN MAX, each within the key's limits, MIN <= MAX
]

SECTIONS: tuple[str, ...] = ("ssh", "mpi", "runtime", "elastic")

# Ceilings that keep a value inside what the code can act on: waits longer than these
# overflow the timers they go to, and plans larger than MAX_RANKS cannot be held.
MAX_RANKS = 1 << 20
MAX_FUSION_MB = 65536
DAY_SECONDS = 86400.0
WEEK_SECONDS = 7 * DAY_SECONDS
# The command-line option of a key where it is not ``--`` + its name (``--ssh-`` + name for
# the ssh section).
_OPTIONS = {
    "np": "-np", "runtime.timeline": "--timeline-filename", "ssh.python": "--python",
    "ssh.config_file": "--ssh-config", "ssh.host_key_policy": "--host-key-policy",
    "mpi.mpirun": "--mpirun", "mpi.args": "--mpi-args",
    "mpi.network_interface": "--network-interface", "elastic.timeout": "--elastic-timeout",
}


@dataclass(frozen=True)
class Key:
    """One setting: its dotted path, its kind and the values it accepts."""

    path: str
    kind: Kind
    choices: tuple[str, ...] = ()
    low: float | None = None        # the smallest value allowed
    high: float | None = None       # the largest value allowed
    above: bool = False             # the value must be greater than ``low``, not equal
    nullable: bool = False          # null (None) is a value the setting can hold
    in_profile: bool = True
    in_environ: bool = True

    @property
    def name(self) -> str:
        return self.path.rpartition(".")[2]

    @property
    def section(self) -> str:
        return self.path.rpartition(".")[0]

    @property
    def environ_name(self) -> str | None:
        """The variable that sets the key: ``GCURUN_`` + its option's name, upper-cased
        (``GCURUN_SSH_PORT`` for ``--ssh-port``); None for a key the environment cannot set."""
        if not self.in_environ:
            return None
        return "GCURUN_" + self.option.lstrip("-").upper().replace("-", "_")

    @property
    def option(self) -> str:
        """The command-line option that sets the key: ``--ssh-port`` for ``ssh.port``."""
        if self.path in _OPTIONS:
            return _OPTIONS[self.path]
        name = self.path if self.section == "ssh" else self.name
        return "--" + name.replace(".", "-").replace("_", "-")

    @property
    def noun(self) -> str:
        """The type a value must have, for error messages: ``an integer``."""
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        return _NOUNS[self.kind]

    def expected(self) -> str:
        """The type and range a value must have: ``an integer of at least 1``."""
        noun = self.noun
        if self.low is not None and self.high is not None:
            if self.above:
                return f"{noun} above {_num(self.low)} and at most {_num(self.high)}"
            return f"{noun} from {_num(self.low)} to {_num(self.high)}"
        if self.low is not None:
            return f"{noun} {'above' if self.above else 'of at least'} {_num(self.low)}"
        return noun

    def in_range(self, value: float) -> bool:
        """Whether a number is finite and inside the key's bounds."""
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.above and value == self.low)):
            return False
        return self.high is None or value <= self.high


_NOUNS: dict[str, str] = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "user": "a user name",
    "path": "a file path",
    "devices": "a list of device ids",
    "names": "a list of environment variable names",
    "env": "a mapping of variable names to values",
    "hosts": "a list of hosts",
    "args": "a list of arguments or one string",
    "ranks": "a list of rank numbers",
    "pair": "two integers MIN MAX",
}


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _choices(literal: object) -> tuple[str, ...]:
    return tuple(str(v) for v in get_args(literal))


KEYS: tuple[Key, ...] = (
    Key("np", "int", low=1, high=MAX_RANKS, nullable=True),
    Key("hosts", "hosts", nullable=True),
    Key("hostfile", "path", nullable=True),
    Key("oversubscribe", "bool"),
    Key("accelerator", "choice", choices=_choices(Accelerator)),
    Key("devices", "devices", nullable=True),
    Key("device_isolation", "bool"),
    Key("launcher", "choice", choices=("local", "ssh", "mpi", "slurm"), nullable=True),
    Key("env", "env", in_environ=False),
    Key("forward_env", "names", in_environ=False),
    Key("env_forward", "choice", choices=("all", "listed")),
    Key("bind_to", "choice", choices=_choices(BindTo)),
    Key("map_by", "choice", choices=_choices(MapBy)),
    Key("report_bindings", "bool"),
    Key("output_dir", "str", nullable=True),
    Key("show_ranks", "ranks", nullable=True, in_profile=False, in_environ=False),
    Key("grace_seconds", "float", low=0, high=DAY_SECONDS),
    Key("liveness_timeout", "float", low=0, high=DAY_SECONDS, above=True),
    Key("workdir", "str", nullable=True),
    Key("master_addr", "str", nullable=True, in_profile=False, in_environ=False),
    Key("master_port", "int", low=1, high=65535, nullable=True, in_profile=False,
        in_environ=False),
    Key("horovod_alias", "choice", choices=_choices(HorovodAlias)),
    Key("ssh.user", "user", nullable=True),
    Key("ssh.port", "int", low=1, high=65535, nullable=True),
    Key("ssh.identity_file", "path", nullable=True),
    Key("ssh.host_key_policy", "choice", choices=_choices(HostKeyPolicy)),
    Key("ssh.python", "str", nullable=True),
    Key("ssh.timeout", "float", low=0, high=DAY_SECONDS, above=True),
    Key("ssh.config_file", "path", nullable=True),
    Key("ssh.known_hosts", "path", nullable=True),
    Key("mpi.mpirun", "str"),
    Key("mpi.args", "args"),
    Key("mpi.network_interface", "str", nullable=True),
    Key("runtime.backend", "choice", choices=("mpi", "tcp"), nullable=True),
    Key("runtime.fusion_threshold_mb", "float", low=0, high=MAX_FUSION_MB),
    Key("runtime.cycle_time_ms", "float", low=0, high=60000, above=True),
    Key("runtime.timeline", "str", nullable=True),
    Key("runtime.timeline_mark_cycles", "bool"),
    Key("runtime.stall_check_warning_seconds", "float", low=0, high=WEEK_SECONDS),
    Key("runtime.stall_check_shutdown_seconds", "float", low=0, high=WEEK_SECONDS),
    Key("runtime.timeout_seconds", "float", low=0, high=WEEK_SECONDS, above=True),
    Key("runtime.hierarchical_allreduce", "bool", nullable=True),
    Key("runtime.autotune", "bool"),
    Key("runtime.autotune_log_file", "path", nullable=True),
    Key("runtime.autotune_warmup_samples", "int", low=0, high=MAX_RANKS),
    Key("runtime.autotune_steps_per_sample", "int", low=1, high=MAX_RANKS),
    Key("runtime.autotune_bayes_opt_max_samples", "int", low=1, high=MAX_RANKS),
    Key("runtime.autotune_gaussian_process_noise", "float", low=0, high=1),
    Key("runtime.autotune_cache", "path", nullable=True),
    Key("elastic.min_np", "int", low=1, high=MAX_RANKS, nullable=True),
    Key("elastic.max_np", "int", low=1, high=MAX_RANKS, nullable=True),
    Key("elastic.host_discovery_script", "str", nullable=True),
    Key("elastic.slots", "int", low=1, high=MAX_RANKS, nullable=True),
    Key("elastic.reset_limit", "int", low=0, high=MAX_RANKS, nullable=True),
    Key("elastic.timeout", "float", low=0, high=WEEK_SECONDS, above=True),
    # Horovod's DEFAULT_COOLDOWN_LOWER_LIMIT_SECONDS and DEFAULT_COOLDOWN_UPPER_LIMIT_SECONDS
    Key("elastic.blacklist_cooldown_range", "pair", low=1, high=3600, nullable=True),
)

KEYS_BY_PATH: dict[str, Key] = {key.path: key for key in KEYS}

# The variables some keys were read from before the naming rule above (the section kept for
# ssh, mpi and elastic keys, dropped for runtime keys): still read, below the new name, and
# answered with a notice to rename them. To be removed in a later release.
OLD_ENVIRON_NAMES: dict[str, str] = {
    "GCURUN_SSH_HOST_KEY_POLICY": "ssh.host_key_policy",
    "GCURUN_SSH_PYTHON": "ssh.python",
    "GCURUN_SSH_CONFIG_FILE": "ssh.config_file",
    "GCURUN_MPI_MPIRUN": "mpi.mpirun",
    "GCURUN_MPI_NETWORK_INTERFACE": "mpi.network_interface",
    "GCURUN_TIMELINE": "runtime.timeline",
    "GCURUN_ELASTIC_MIN_NP": "elastic.min_np",
    "GCURUN_ELASTIC_MAX_NP": "elastic.max_np",
    "GCURUN_ELASTIC_HOST_DISCOVERY_SCRIPT": "elastic.host_discovery_script",
    "GCURUN_ELASTIC_SLOTS": "elastic.slots",
    "GCURUN_ELASTIC_RESET_LIMIT": "elastic.reset_limit",
    "GCURUN_ELASTIC_BLACKLIST_COOLDOWN_RANGE": "elastic.blacklist_cooldown_range",
}


def old_variable_notices(environ: Mapping[str, str]) -> list[str]:
    """One notice for every variable of ``environ`` set under an old name."""
    notices = []
    for old, path in OLD_ENVIRON_NAMES.items():
        if environ.get(old, "").strip():
            new = KEYS_BY_PATH[path].environ_name
            notices.append(f"{old} is the old name of {new}; rename it (the old name will "
                           "stop working in a later release)")
    return notices

# The keys of one host given as a mapping in a profile's ``hosts`` list.
HOST_KEYS: dict[str, Key] = {
    key.path: key
    for key in (
        Key("name", "str"),
        Key("slots", "int", low=1, high=MAX_RANKS),
        Key("devices", "devices"),
        Key("user", "user"),
        Key("port", "int", low=1, high=65535),
        Key("python", "str"),
        Key("max_slots", "int", low=1, high=MAX_RANKS),
    )
}
