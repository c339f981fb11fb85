"""The resolved settings of one gcurun invocation.

Precedence is CLI > profile > GCURUN_* environment > defaults, decided in one function
(:func:`gcurun.config.resolve.resolve_settings`). ``Settings.sources`` records, for each
dotted key (``np``, ``ssh.port``, ``elastic.min_np`` ...), where its value came from:
``cli``, ``profile:<file>:<line>``, ``env:<VAR>`` or ``default``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from gcurun.hosts.api import HostSpec

Accelerator = Literal["gcu", "cuda", "rocm", "ascend", "mlu", "none"]
BindTo = Literal["none", "core", "socket", "numa"]
MapBy = Literal["slot", "numa", "socket"]
HostKeyPolicy = Literal["strict", "accept-new", "off"]
# Whether `import horovod.*` on the ranks gives gcurun's bindings: never, unless Horovod is
# installed there, or always.
HorovodAlias = Literal["off", "on", "force"]

# The variable each accelerator reads to know which devices a process may use.
DEVICE_VARIABLES: Mapping[str, str | None] = {
    "gcu": "TOPS_VISIBLE_DEVICES",
    "cuda": "CUDA_VISIBLE_DEVICES",
    "rocm": "ROCR_VISIBLE_DEVICES",
    "ascend": "ASCEND_RT_VISIBLE_DEVICES",
    "mlu": "MLU_VISIBLE_DEVICES",
    "none": None,
}


@dataclass(frozen=True)
class SSHSettings:
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    host_key_policy: HostKeyPolicy = "strict"
    python: str | None = None          # remote interpreter; None = the launcher's own path
    timeout: float = 10.0              # seconds to connect and pass the preflight
    config_file: str | None = "~/.ssh/config"
    known_hosts: str | None = None     # extra known_hosts file beside ~/.ssh/known_hosts


@dataclass(frozen=True)
class MPISettings:
    mpirun: str = "mpirun"
    args: tuple[str, ...] = ()
    network_interface: str | None = None   # a NAME (eth0) or a CIDR (10.0.0.0/24)


@dataclass(frozen=True)
class RuntimeSettings:
    backend: str | None = None               # mpi | tcp | None (automatic)
    fusion_threshold_mb: float = 64.0
    cycle_time_ms: float = 1.0
    timeline: str | None = None
    timeline_mark_cycles: bool = False
    stall_check_warning_seconds: float = 60.0
    stall_check_shutdown_seconds: float = 0.0   # 0 disables the shutdown
    timeout_seconds: float = 300.0              # every blocking wait of a rank
    hierarchical_allreduce: bool | None = None  # two-level allreduce; None = when faster
    # Autotune (Horovod's --autotune*; defaults those of its parameter manager)
    autotune: bool = False
    autotune_log_file: str | None = None        # the CSV log of samples (rank 0's host)
    autotune_warmup_samples: int = 3
    autotune_steps_per_sample: int = 10
    autotune_bayes_opt_max_samples: int = 20
    autotune_gaussian_process_noise: float = 0.8
    autotune_cache: str | None = None           # what was learned, per job shape


@dataclass(frozen=True)
class ElasticSettings:
    """Horovod Elastic's options. A job is elastic when ``min_np`` or
    ``host_discovery_script`` is set; a static job is the case min = max, with none set."""

    min_np: int | None = None                   # the fewest ranks the job may run with
    max_np: int | None = None                   # the most; None: -np, else unbounded
    host_discovery_script: str | None = None    # prints 'host:slots' lines; None: the hosts
    slots: int | None = None                    # slots of a bare line of the script
    reset_limit: int | None = None              # re-formations allowed; None: any number
    timeout: float = 600.0                      # seconds to wait for slots and re-joins
    blacklist_cooldown_range: tuple[int, int] | None = None  # None: blacklisted for good

    @property
    def enabled(self) -> bool:
        """Whether these settings make the job elastic (Horovod's rule)."""
        return self.min_np is not None or bool(self.host_discovery_script)


@dataclass(frozen=True)
class Settings:
    """Everything one run of gcurun needs besides the command."""

    np: int | None = None
    hosts: tuple[HostSpec, ...] | None = None   # None = this host only
    hostfile: str | None = None                 # the hostfile that gave hosts, if any
    oversubscribe: bool = False
    accelerator: Accelerator = "gcu"
    devices: tuple[str, ...] | None = None      # applies to hosts without their own list
    device_isolation: bool = False              # each rank sees its own device alone
    launcher: Literal["local", "ssh", "mpi", "slurm"] | None = None  # None: local or ssh
    env: Mapping[str, str] = field(default_factory=dict)     # variables to set (-x N=V)
    forward_env: tuple[str, ...] = ()                        # variables to forward (-x N)
    # What of the launcher's environment reaches ranks on other hosts: all of it but what
    # belongs to this host (gcurun.launch.planning.forwarding), or only the -x names.
    env_forward: Literal["all", "listed"] = "all"
    bind_to: BindTo = "none"
    map_by: MapBy = "slot"
    report_bindings: bool = False
    output_dir: str | None = None
    show_ranks: tuple[int, ...] | None = None   # console filter; None = every rank
    grace_seconds: float = 10.0
    liveness_timeout: float = 10.0              # silence that counts a host's link as lost
    workdir: str | None = None
    master_addr: str | None = None              # torch's MASTER_ADDR; None = rank 0's host
    master_port: int | None = None              # torch's MASTER_PORT; None = a free port
    horovod_alias: HorovodAlias = "off"        # import horovod.* as gcurun's bindings
    ssh: SSHSettings = field(default_factory=SSHSettings)
    mpi: MPISettings = field(default_factory=MPISettings)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    elastic: ElasticSettings = field(default_factory=ElasticSettings)
    sources: Mapping[str, str] = field(default_factory=dict)
