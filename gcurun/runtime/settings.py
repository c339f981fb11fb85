"""Every environment variable the runtime reads, parsed in one place.

:func:`parse_runtime_env` is pure (a mapping in, a frozen record out);
:func:`read_runtime_env` applies it to ``os.environ``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gcurun.errors import UsageError

BackendName = Literal["mpi", "tcp", "local"]
BACKENDS: tuple[BackendName, ...] = ("mpi", "tcp", "local")

DEFAULT_TIMEOUT_SECONDS = 300.0
DEFAULT_CHUNK_BYTES = 2 << 20
DEFAULT_CACHE_CAPACITY = 1024
DEFAULT_TIMELINE_MAX_MB = 1024.0
DEFAULT_LIVENESS_SECONDS = 10.0
# Horovod's autotune defaults (its parameter manager's).
DEFAULT_AUTOTUNE_WARMUP_SAMPLES = 3
DEFAULT_AUTOTUNE_STEPS_PER_SAMPLE = 10
DEFAULT_AUTOTUNE_MAX_SAMPLES = 20
DEFAULT_AUTOTUNE_NOISE = 0.8
DEFAULT_AUTOTUNE_RETUNE_THRESHOLD = 0.2
AUTOTUNE_SAMPLERS = ("gp", "tpe")

# Variables that MPI launchers (mpirun of Open MPI, MPICH/Hydra, Intel MPI, MVAPICH,
# srun with PMI/PMIx) set on every rank they start.
MPI_LAUNCHER_VARIABLES = (
    "OMPI_COMM_WORLD_SIZE",
    "PMIX_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALNRANKS",
    "MV2_COMM_WORLD_SIZE",
)


@dataclass(frozen=True)
class RankFacts:
    """Who a rank is, as gcurun's launcher told it (GCURUN_RANK ... GCURUN_HOSTNAME)."""

    rank: int
    size: int
    local_rank: int | None = None
    local_size: int | None = None
    cross_rank: int | None = None
    cross_size: int | None = None
    hostname: str | None = None


@dataclass(frozen=True)
class RuntimeEnv:
    backend: BackendName | None = None            # GCURUN_BACKEND; None = automatic
    facts: RankFacts | None = None                # None when GCURUN_RANK/SIZE are absent
    rendezvous: tuple[str, int] | None = None     # GCURUN_RENDEZVOUS
    secret: bytes | None = None                   # GCURUN_SECRET (hex)
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    under_mpi_launcher: bool = False              # started by mpirun/mpiexec/srun
    cma: bool = True                              # GCURUN_CMA: same-host single-copy reads
    rings: bool = True                            # GCURUN_SHM: same-host shared-memory rings
    huge_pages: bool = True                       # GCURUN_HUGE_PAGES: collapse big tensors
    chunk_bytes: int = DEFAULT_CHUNK_BYTES        # GCURUN_CHUNK_BYTES: ring pipeline chunk
    # Knobs of the background engine (read here so that all variables live in one module).
    fusion_threshold_mb: float = 64.0
    cycle_time_ms: float = 1.0
    timeline: str | None = None
    timeline_mark_cycles: bool = False
    stall_check_warning_seconds: float = 60.0     # 0 disables the warnings
    stall_check_shutdown_seconds: float = 0.0     # 0 disables the shutdown
    cache_capacity: int = DEFAULT_CACHE_CAPACITY  # GCURUN_CACHE_CAPACITY: negotiation cache
    timeline_max_mb: float = DEFAULT_TIMELINE_MAX_MB
    # Elastic jobs: this process's worker id (GCURUN_ELASTIC_WORKER; None: not elastic)
    # and how long a silent connection may last before it counts as broken.
    elastic_worker: int | None = None
    liveness_seconds: float = DEFAULT_LIVENESS_SECONDS  # GCURUN_LIVENESS_TIMEOUT_SECONDS
    # GCURUN_HIERARCHICAL_ALLREDUCE: two-level allreduce always (True), never (False), or
    # when the layout allows it and it is faster (None)
    hierarchical_allreduce: bool | None = None
    # GCURUN_NETWORK_INTERFACE: the tcp backend's network between hosts, a NAME or a CIDR
    network_interface: str | None = None
    # GCURUN_LOG_LEVEL (HOROVOD_LOG_LEVEL): the least level of the runtime's messages on
    # stderr, a name of LOG_LEVELS; None leaves Python's logging as it is
    log_level: str | None = None
    # The ring's chunk between hosts (GCURUN_STREAM_BYTES; None: the ring's own default)
    stream_bytes: int | None = None
    # Autotune (rank 0 searches the knobs while the job trains: gcurun.runtime.autotune)
    autotune: AutotuneEnv | None = None
    # The tunable knobs whose variable is set: autotune holds them constant.
    knobs_set: frozenset[str] = frozenset()


@dataclass(frozen=True)
class AutotuneEnv:
    """GCURUN_AUTOTUNE* (HOROVOD_AUTOTUNE*): how rank 0 tunes the engine's knobs."""

    log_file: str | None = None                  # GCURUN_AUTOTUNE_LOG_FILE: the CSV log
    warmup_samples: int = DEFAULT_AUTOTUNE_WARMUP_SAMPLES
    steps_per_sample: int = DEFAULT_AUTOTUNE_STEPS_PER_SAMPLE
    max_samples: int = DEFAULT_AUTOTUNE_MAX_SAMPLES     # ..._BAYES_OPT_MAX_SAMPLES
    noise: float = DEFAULT_AUTOTUNE_NOISE               # ..._GAUSSIAN_PROCESS_NOISE
    cache: str | None = None                     # GCURUN_AUTOTUNE_CACHE: what was learned
    retune_threshold: float = DEFAULT_AUTOTUNE_RETUNE_THRESHOLD
    sampler: str = "gp"                          # GCURUN_AUTOTUNE_SAMPLER: gp or tpe
    seed: int | None = None                      # GCURUN_AUTOTUNE_SEED


def parse_runtime_env(environ: Mapping[str, str]) -> RuntimeEnv:
    """Read the runtime's variables from ``environ``.

    Raises :class:`gcurun.errors.UsageError` naming the variable, its value and the rule.
    """
    backend = _backend(environ.get("GCURUN_BACKEND"))
    secret_hex = _text(environ, "GCURUN_SECRET")
    return RuntimeEnv(
        backend=backend,
        facts=_facts(environ),
        rendezvous=_address(environ.get("GCURUN_RENDEZVOUS")),
        secret=_secret(secret_hex) if secret_hex is not None else None,
        timeout_seconds=_positive(environ, "GCURUN_TIMEOUT_SECONDS", DEFAULT_TIMEOUT_SECONDS),
        under_mpi_launcher=_under_mpi_launcher(environ),
        cma=_flag(environ, "GCURUN_CMA", True),
        rings=_flag(environ, "GCURUN_SHM", True),
        huge_pages=_flag(environ, "GCURUN_HUGE_PAGES", True),
        chunk_bytes=int(_positive(environ, "GCURUN_CHUNK_BYTES", DEFAULT_CHUNK_BYTES)),
        elastic_worker=_int(environ, "GCURUN_ELASTIC_WORKER", 0),
        liveness_seconds=_positive(environ, "GCURUN_LIVENESS_TIMEOUT_SECONDS",
                                   DEFAULT_LIVENESS_SECONDS),
        log_level=_log_level(environ, _pick(environ, "GCURUN_LOG_LEVEL")),
        stream_bytes=_int(environ, "GCURUN_STREAM_BYTES", 1),
        autotune=_autotune(environ),
        knobs_set=_knobs_set(environ),
        **_engine_knobs(environ),
    )


# The variables of each knob autotune searches (a knob whose variable is set is held).
KNOB_VARIABLES = {
    "fusion_threshold_mb": ("GCURUN_FUSION_THRESHOLD_MB", "HOROVOD_FUSION_THRESHOLD"),
    "cycle_time_ms": ("GCURUN_CYCLE_TIME_MS", "HOROVOD_CYCLE_TIME"),
    "cache_enabled": ("GCURUN_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY"),
    "hierarchical_allreduce": ("GCURUN_HIERARCHICAL_ALLREDUCE",
                               "HOROVOD_HIERARCHICAL_ALLREDUCE"),
    "chunk_bytes": ("GCURUN_CHUNK_BYTES",),
    "stream_bytes": ("GCURUN_STREAM_BYTES",),
}


def _knobs_set(environ: Mapping[str, str]) -> frozenset[str]:
    return frozenset(knob for knob, names in KNOB_VARIABLES.items()
                     if any(environ.get(name, "").strip() for name in names))


def _autotune(environ: Mapping[str, str]) -> AutotuneEnv | None:
    if not _flag(environ, _pick(environ, "GCURUN_AUTOTUNE"), False):
        return None
    sampler = (_text(environ, "GCURUN_AUTOTUNE_SAMPLER") or "gp").strip().lower()
    if sampler not in AUTOTUNE_SAMPLERS:
        raise UsageError(f"GCURUN_AUTOTUNE_SAMPLER={sampler!r}: use one of "
                         f"{', '.join(AUTOTUNE_SAMPLERS)}")
    noise = _non_negative(environ, _pick(environ, "GCURUN_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"),
                          DEFAULT_AUTOTUNE_NOISE)
    if noise > 1:
        raise UsageError(f"{_pick(environ, 'GCURUN_AUTOTUNE_GAUSSIAN_PROCESS_NOISE')}="
                         f"{noise:g}: must be from 0 to 1")
    return AutotuneEnv(
        log_file=_text(environ, _pick(environ, "GCURUN_AUTOTUNE_LOG_FILE")),
        warmup_samples=_count(environ, "GCURUN_AUTOTUNE_WARMUP_SAMPLES", 0,
                              DEFAULT_AUTOTUNE_WARMUP_SAMPLES),
        steps_per_sample=_count(environ, "GCURUN_AUTOTUNE_STEPS_PER_SAMPLE", 1,
                                DEFAULT_AUTOTUNE_STEPS_PER_SAMPLE),
        max_samples=_count(environ, "GCURUN_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", 1,
                           DEFAULT_AUTOTUNE_MAX_SAMPLES),
        noise=noise,
        cache=_text(environ, "GCURUN_AUTOTUNE_CACHE"),
        retune_threshold=_positive(environ, "GCURUN_AUTOTUNE_RETUNE_THRESHOLD",
                                   DEFAULT_AUTOTUNE_RETUNE_THRESHOLD),
        sampler=sampler,
        seed=_int(environ, "GCURUN_AUTOTUNE_SEED", 0),
    )


def _count(environ: Mapping[str, str], name: str, minimum: int, default: int) -> int:
    value = _int(environ, _pick(environ, name), minimum)
    return default if value is None else value


# Horovod's names for the engine's knobs (a script run directly under mpirun may set
# them); a GCURUN_* variable wins over its twin.
HOROVOD_TWINS = {
    "GCURUN_CYCLE_TIME_MS": "HOROVOD_CYCLE_TIME",
    "GCURUN_TIMELINE_FILENAME": "HOROVOD_TIMELINE",
    "GCURUN_TIMELINE_MARK_CYCLES": "HOROVOD_TIMELINE_MARK_CYCLES",
    "GCURUN_STALL_CHECK_WARNING_SECONDS": "HOROVOD_STALL_CHECK_TIME_SECONDS",
    "GCURUN_STALL_CHECK_SHUTDOWN_SECONDS": "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
    "GCURUN_CACHE_CAPACITY": "HOROVOD_CACHE_CAPACITY",
    "GCURUN_HIERARCHICAL_ALLREDUCE": "HOROVOD_HIERARCHICAL_ALLREDUCE",
    "GCURUN_NETWORK_INTERFACE": "HOROVOD_GLOO_IFACE",
    "GCURUN_LOG_LEVEL": "HOROVOD_LOG_LEVEL",
    "GCURUN_AUTOTUNE": "HOROVOD_AUTOTUNE",
    "GCURUN_AUTOTUNE_LOG_FILE": "HOROVOD_AUTOTUNE_LOG",
    "GCURUN_AUTOTUNE_WARMUP_SAMPLES": "HOROVOD_AUTOTUNE_WARMUP_SAMPLES",
    "GCURUN_AUTOTUNE_STEPS_PER_SAMPLE": "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE",
    "GCURUN_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
    "GCURUN_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
}

LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL")


def _log_level(environ: Mapping[str, str], name: str) -> str | None:
    value = _text(environ, name)
    if value is None or not value.strip():
        return None
    if value.strip().upper() not in LOG_LEVELS:
        raise UsageError(f"{name}={value!r}: not a log level; use one of "
                         f"{', '.join(LOG_LEVELS)}")
    return value.strip().upper()


# A knob's variable before the naming rule of gcurun.config.schema, still read below it.
OLD_NAMES = {"GCURUN_TIMELINE_FILENAME": "GCURUN_TIMELINE"}


def _pick(environ: Mapping[str, str], name: str) -> str:
    """The variable that sets knob ``name``: itself when set, else its old name, else its
    Horovod twin."""
    old = OLD_NAMES.get(name)
    if old is not None and not environ.get(name, "").strip() and environ.get(old, "").strip():
        return old
    twin = HOROVOD_TWINS.get(name)
    if environ.get(name, "").strip() or twin is None or not environ.get(twin, "").strip():
        return name
    return twin


def _engine_knobs(environ: Mapping[str, str]) -> dict[str, Any]:
    if not environ.get("GCURUN_FUSION_THRESHOLD_MB", "").strip() and \
            environ.get("HOROVOD_FUSION_THRESHOLD", "").strip():
        threshold = _non_negative(environ, "HOROVOD_FUSION_THRESHOLD", 0) / (1 << 20)
    else:
        threshold = _non_negative(environ, "GCURUN_FUSION_THRESHOLD_MB", 64.0)
    warning = _non_negative(environ, _pick(environ, "GCURUN_STALL_CHECK_WARNING_SECONDS"),
                            60.0)
    if not environ.get("GCURUN_STALL_CHECK_WARNING_SECONDS", "").strip() and \
            _flag(environ, "HOROVOD_STALL_CHECK_DISABLE", False):
        warning = 0.0
    capacity = _pick(environ, "GCURUN_CACHE_CAPACITY")
    return {
        "fusion_threshold_mb": threshold,
        "cycle_time_ms": _positive(environ, _pick(environ, "GCURUN_CYCLE_TIME_MS"), 1.0),
        "timeline": _timeline(environ, _pick(environ, "GCURUN_TIMELINE_FILENAME")),
        "timeline_mark_cycles": _flag(environ, _pick(environ, "GCURUN_TIMELINE_MARK_CYCLES"),
                                      False),
        "stall_check_warning_seconds": warning,
        "stall_check_shutdown_seconds": _non_negative(
            environ, _pick(environ, "GCURUN_STALL_CHECK_SHUTDOWN_SECONDS"), 0.0),
        "cache_capacity": _int(environ, capacity, 0) if environ.get(capacity, "").strip()
        else DEFAULT_CACHE_CAPACITY,
        "timeline_max_mb": _positive(environ, "GCURUN_TIMELINE_MAX_MB",
                                     DEFAULT_TIMELINE_MAX_MB),
        "hierarchical_allreduce": _tristate(environ,
                                            _pick(environ, "GCURUN_HIERARCHICAL_ALLREDUCE")),
        "network_interface": _interface(environ, _pick(environ, "GCURUN_NETWORK_INTERFACE")),
    }


def read_runtime_env() -> RuntimeEnv:
    return parse_runtime_env(os.environ)


def parse_address(text: str, what: str = "GCURUN_RENDEZVOUS") -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port)."""
    host, sep, port_text = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError(f"{what}={text!r}: expected HOST:PORT with a port 1-65535, "
                         "such as 10.0.0.1:29400 or [fe80::1]:29400")
    return host, int(port_text)


def _text(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    return value if value else None


# Horovod's value for "no file at start: the script calls start_timeline()". gcurun's
# start_timeline() works whatever the variable says, so it means no timeline here.
DYNAMIC_TIMELINE = "DYNAMIC"


def _timeline(environ: Mapping[str, str], name: str) -> str | None:
    value = _text(environ, name)
    return None if value == DYNAMIC_TIMELINE else value


def _backend(value: str | None) -> BackendName | None:
    if not value:
        return None
    lowered = value.strip().lower()
    for name in BACKENDS:
        if lowered == name:
            return name
    raise UsageError(f"GCURUN_BACKEND={value!r}: unknown backend; use one of "
                     f"{', '.join(BACKENDS)} or unset it to choose automatically")


def _int(environ: Mapping[str, str], name: str, minimum: int) -> int | None:
    value = environ.get(name)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise UsageError(f"{name}={value!r}: expected an integer >= {minimum}")
    return number


def _facts(environ: Mapping[str, str]) -> RankFacts | None:
    rank = _int(environ, "GCURUN_RANK", 0)
    size = _int(environ, "GCURUN_SIZE", 1)
    if rank is None and size is None:
        return None
    if rank is None or size is None:
        missing = "GCURUN_SIZE" if size is None else "GCURUN_RANK"
        raise UsageError(f"{missing} is unset while its twin is set; the launcher sets both "
                         "(start the job with gcurun, or unset both to run alone)")
    if rank >= size:
        raise UsageError(f"GCURUN_RANK={rank} is not below GCURUN_SIZE={size}")
    local_rank = _int(environ, "GCURUN_LOCAL_RANK", 0)
    local_size = _int(environ, "GCURUN_LOCAL_SIZE", 1)
    if local_rank is not None and local_size is not None and local_rank >= local_size:
        raise UsageError(f"GCURUN_LOCAL_RANK={local_rank} is not below "
                         f"GCURUN_LOCAL_SIZE={local_size}")
    return RankFacts(
        rank=rank,
        size=size,
        local_rank=local_rank,
        local_size=local_size,
        cross_rank=_int(environ, "GCURUN_CROSS_RANK", 0),
        cross_size=_int(environ, "GCURUN_CROSS_SIZE", 1),
        hostname=_text(environ, "GCURUN_HOSTNAME"),
    )


def _address(value: str | None) -> tuple[str, int] | None:
    return parse_address(value) if value else None


def _secret(value: str) -> bytes:
    try:
        secret = bytes.fromhex(value.strip())
    except ValueError:
        secret = b""
    if len(secret) < 16:
        raise UsageError("GCURUN_SECRET is not a hex string of at least 16 bytes; the "
                         "launcher sets it (its value is not shown here)")
    return secret


def _number(environ: Mapping[str, str], name: str, default: float) -> float:
    value = environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        return float(value)
    except ValueError:
        raise UsageError(f"{name}={value!r}: not a number") from None


def _positive(environ: Mapping[str, str], name: str, default: float) -> float:
    number = _number(environ, name, default)
    if not number > 0:
        raise UsageError(f"{name}={environ.get(name)!r}: must be greater than 0")
    return number


def _non_negative(environ: Mapping[str, str], name: str, default: float) -> float:
    number = _number(environ, name, default)
    if not number >= 0:
        raise UsageError(f"{name}={environ.get(name)!r}: must be 0 or more")
    return number


def _flag(environ: Mapping[str, str], name: str, default: bool) -> bool:
    value = environ.get(name)
    if value is None or value.strip() == "":
        return default
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"{name}={value!r}: expected 1/0, true/false, yes/no or on/off")


def _tristate(environ: Mapping[str, str], name: str) -> bool | None:
    """A flag that may also be unset (None: decide automatically)."""
    value = environ.get(name)
    if value is None or value.strip() == "":
        return None
    return _flag(environ, name, False)


def _interface(environ: Mapping[str, str], name: str) -> str | None:
    """An interface NAME or a CIDR, checked here so that a bad value fails at init."""
    value = _text(environ, name)
    if value is None:
        return None
    from gcurun.runtime.transport.addresses import parse_interface_choice

    try:
        parse_interface_choice(value)
    except ValueError as exc:
        raise UsageError(f"{name}={value!r}: {exc}") from None
    return value.strip()


def _under_mpi_launcher(environ: Mapping[str, str]) -> bool:
    if any(environ.get(name) for name in MPI_LAUNCHER_VARIABLES):
        return True
    # srun sets the step's task count on every task it starts.
    return bool(environ.get("SLURM_STEP_ID")) and _int(environ, "SLURM_STEP_NUM_TASKS", 0) \
        not in (None, 0, 1)
