"""Building the launch plan: a pure function from hosts, command and settings to ranks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gcurun.config.schema import MAX_RANKS
from gcurun.errors import PlanError
from gcurun.hosts.api import HostSpec
from gcurun.hosts.locality import locality_test
from gcurun.launch.api import LauncherName, LaunchPlan, RankSpec
from gcurun.launch.planning.forwarding import Forwarding
from gcurun.launch.remote.rank_env import (
    DEVICE_VARIABLE,
    GCURUN_PREFIX,
    HOROVOD_PREFIX,
    PADDLE_DEVICES,
    PADDLE_ENDPOINTS_VARIABLE,
    RANK_FACTS,
    DeviceList,
    Endpoints,
    paddle_endpoints,
    rank_environment,
)

DEFAULT_LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
LOOPBACK = "127.0.0.1"


def assign_ranks(hosts: Sequence[HostSpec], np: int | None, oversubscribe: bool) -> list[int]:
    """How many ranks each host gets: slots are filled in host order; without ``np``
    every slot gets a rank. Past the total, ``oversubscribe`` deals one more rank to each
    host in turn (never past a host's ``max_slots``).

    Raises PlanError when ``np`` is not positive or exceeds what the hosts may take, and
    for more than MAX_RANKS ranks."""
    total = sum(h.slots for h in hosts)
    if np is None:
        if total > MAX_RANKS:
            raise PlanError(f"the hosts have {total} slots in all, and a rank for each is "
                            f"more than the {MAX_RANKS} ranks gcurun can plan; give -np or "
                            "fewer slots")
        return [h.slots for h in hosts]
    if np < 1:
        raise PlanError(f"-np {np}: the number of ranks must be at least 1")
    if np > MAX_RANKS:
        raise PlanError(f"-np {np}: gcurun plans at most {MAX_RANKS} ranks; lower -np")
    listed = ", ".join(f"{h.display}:{h.slots}" for h in hosts)
    if np > total and not oversubscribe:
        raise PlanError(
            f"-np {np} asks for more ranks than the {total} slots of the hosts ({listed}); "
            "add hosts or slots, lower -np, or pass --oversubscribe")
    counts, left = [], np
    for h in hosts:
        take = min(h.slots, left)
        counts.append(take)
        left -= take
    while left:
        dealt = 0
        for i, h in enumerate(hosts):
            if left and (h.max_slots is None or counts[i] < h.max_slots):
                counts[i] += 1
                left -= 1
                dealt += 1
        if not dealt:
            room = sum(h.max_slots or 0 for h in hosts)
            raise PlanError(
                f"-np {np} exceeds max_slots of every host ({room} in all: {listed}); "
                "raise max_slots in the hostfile or lower -np")
    return counts


_PLACEMENT = "place ranks with -np and -H (or --hostfile)"
_DEVICES = "choose devices with --devices (--device-isolation: each rank sees its own alone)"
_MASTER = "give --master-addr and --master-port"
# The variables the plan sets for each rank, beyond the device variable, and the options
# that decide their values.
_PLANNED: Mapping[str, str] = {
    **{prefix + fact: _PLACEMENT for prefix in (GCURUN_PREFIX, HOROVOD_PREFIX)
       for fact in RANK_FACTS},
    **dict.fromkeys(("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                     "PADDLE_TRAINER_ID", "PADDLE_GLOBAL_RANK", "PADDLE_TRAINERS_NUM",
                     "PADDLE_GLOBAL_SIZE", "PADDLE_LOCAL_RANK", "PADDLE_RANK_IN_NODE",
                     "PADDLE_LOCAL_SIZE", "PADDLE_NNODES", "PADDLE_CURRENT_ENDPOINT",
                     PADDLE_ENDPOINTS_VARIABLE), _PLACEMENT),
    "MASTER_ADDR": "give --master-addr", "MASTER_PORT": "give --master-port",
    "PADDLE_MASTER": _MASTER, "JAX_COORDINATOR_ADDRESS": _MASTER,
    DEVICE_VARIABLE: _DEVICES, "JAX_LOCAL_DEVICE_IDS": _DEVICES,
    **{f"FLAGS_selected_{kind}s": _DEVICES for kind, _ in PADDLE_DEVICES.values()},
    "PADDLE_DISTRI_BACKEND": "choose --accelerator",
    "PADDLE_XCCL_BACKEND": "choose --accelerator",
}


def planned_variable(name: str, device_var: str | None) -> str | None:
    """How to set ``name`` when the plan sets it for each rank (its rank, device or
    rendezvous), else None: such a variable given for every rank would be overridden."""
    if device_var is not None and name == device_var:
        return _DEVICES
    return _PLANNED.get(name)


def check_job_variables(env: Mapping[str, str], forwarded: Sequence[str],
                        device_var: str | None, sources: Mapping[str, str]) -> None:
    """Refuse variables set for every rank (``env``: -x NAME=VALUE or a profile's env;
    ``forwarded``: -x NAME) that the plan sets for each rank itself: the user's value
    would be overridden. ``sources`` (Settings.sources) says where each came from.
    Raises PlanError naming the variable and the option that sets it."""
    given = [(name, f"-x {name}={value}", "env", sources.get(f"env.{name}", "cli"))
             for name, value in env.items()]
    given += [(name, f"-x {name}", "forward_env", sources.get("forward_env", "cli"))
              for name in forwarded]
    for name, shown, key, source in given:
        how = planned_variable(name, device_var)
        if how is None:
            continue
        if source.startswith("profile:"):
            where = f"{source.partition(':')[2]}: {key} {name}"
            drop = f"remove {name} from the profile's {key}"
        else:
            where, drop = shown, f"drop -x {name}"
        raise PlanError(f"{where}: gcurun sets {name} for each rank itself; {how} and {drop}")


def host_devices(host: HostSpec, default: Sequence[str] | None, count: int) -> tuple[str, ...]:
    """The device ids of ``host`` for ``count`` ranks: its own list, else ``default``, else
    ``0..slots-1``. Raises PlanError when the list is shorter than the ranks placed there."""
    if host.devices is not None:
        devices, origin = tuple(host.devices), f"the devices of host '{host.display}'"
    elif default is not None:
        devices, origin = tuple(default), f"--devices {','.join(default)}"
    else:
        devices, origin = tuple(str(i) for i in range(max(host.slots, count))), ""
    if len(devices) < count:
        raise PlanError(
            f"host '{host.display}' runs {count} ranks but {origin} lists only "
            f"{len(devices)}; list at least {count} devices or place fewer ranks there")
    return devices


def build_plan(
    hosts: Sequence[HostSpec],
    command: Sequence[str],
    *,
    np: int | None = None,
    oversubscribe: bool = False,
    accelerator: str = "gcu",
    device_var: str | None = "TOPS_VISIBLE_DEVICES",
    devices: Sequence[str] | None = None,
    device_isolation: bool = False,
    launcher: LauncherName | None = None,
    local_names: frozenset[str] = DEFAULT_LOCAL_NAMES,
    job_env: Mapping[str, str] | None = None,
    forwarded_env: Sequence[str] = (),
    master_addr: str | None = None,
    this_host: str = LOOPBACK,
    master_port: int = 29500,
    workdir: str = "/",
    sources: Mapping[str, str] | None = None,
    forwarding: Forwarding | None = None,
) -> LaunchPlan:
    """Place ranks on hosts and give each its identity, device, argv and environment.

    ``job_env`` is set for every rank (profile env, -x variables, runtime knobs); the
    identity variables of :func:`rank_environment` win over it. ``master_addr`` defaults to
    loopback when every rank is local, to ``this_host`` (a name of the launcher's host that
    other hosts can resolve) when rank 0 is local but others are not, and to rank 0's host
    otherwise. Paddle's endpoints (``PADDLE_TRAINER_ENDPOINTS``) name each rank's host the
    same way: loopback when every rank is local, ``this_host`` for this host, else the
    host's name.

    ``forwarding`` is what of the launcher's environment ranks on other hosts get (kept
    apart from the ranks' environment: every rank shares it, and its values are never shown).

    Each rank's device is its local rank's entry of its host's devices (the host's own
    list, else ``devices``, else ``0..slots-1``). The device variable lists all of them,
    in that order, so index LOCAL_RANK is the rank's own device (as every Horovod recipe
    assumes); with ``device_isolation`` it lists the rank's device alone (index 0).

    Raises PlanError for an empty command or host list, or ranks that do not fit (the
    launcher kind checks its hosts: :meth:`gcurun.launch.kinds.LauncherKind.check_hosts`).
    """
    if not command:
        raise PlanError("no command given; put it after the options: gcurun -np 2 python train.py")
    if not hosts:
        raise PlanError("no hosts given; use -H host:slots, --hostfile FILE or a profile")
    counts = assign_ranks(hosts, np, oversubscribe)
    used = [(h, n) for h, n in zip(hosts, counts, strict=True) if n > 0]
    # Each host's locality is decided once: plans of thousands of ranks stay linear.
    is_local = locality_test(local_names)
    local = [is_local(h.name) for h, _ in used]
    all_local = all(local)
    if launcher is None:
        launcher = "local" if all_local else "ssh"
    if master_addr is None:
        first = used[0][0]
        if all_local:
            master_addr = LOOPBACK
        elif local[0]:
            master_addr = this_host
        else:
            master_addr = first.name
    cross_sizes = [sum(1 for _, n in used if n > lr) for lr in range(max(counts))]
    addresses = [LOOPBACK if all_local else this_host if local[i] else h.name
                 for i, (h, _) in enumerate(used)]
    endpoints = Endpoints(paddle_endpoints(addresses, [n for _, n in used], master_port))
    hosts_before = [0] * len(cross_sizes)   # hosts so far that have each local rank
    size = sum(counts)
    ranks: list[RankSpec] = []
    for node_rank, (host, count) in enumerate(used):
        ids = host_devices(host, devices, count) if device_var else ()
        shared = DeviceList(ids)
        for local_rank in range(count):
            device = ids[local_rank] if device_var else None
            visible = None if device is None or device_isolation else shared
            cross_rank = hosts_before[local_rank]
            env = dict(job_env or {})
            env.update(rank_environment(
                rank=len(ranks), size=size, local_rank=local_rank, local_size=count,
                cross_rank=cross_rank, cross_size=cross_sizes[local_rank],
                node_rank=node_rank, hostname=host.name, master_addr=master_addr,
                master_port=master_port, device_var=device_var, device=device,
                visible_devices=visible, node_count=len(used), endpoints=endpoints))
            ranks.append(RankSpec(
                rank=len(ranks), local_rank=local_rank, local_size=count,
                cross_rank=cross_rank, cross_size=cross_sizes[local_rank],
                node_rank=node_rank, host=host.name, is_local=local[node_rank],
                device=device, argv=tuple(command), env=env,
                visible_devices=None if device is None else
                (device,) if visible is None else shared.ids))
        for local_rank in range(count):
            hosts_before[local_rank] += 1
    return LaunchPlan(
        ranks=tuple(ranks), hosts=tuple(h for h, _ in used), launcher=launcher,
        accelerator=accelerator, device_var=device_var, device_isolation=device_isolation,
        master_addr=master_addr,
        master_port=master_port, workdir=workdir, forwarded_env=tuple(forwarded_env),
        sources=dict(sources or {}),
        launcher_env=dict(forwarding.env) if forwarding else {},
        env_left_out=forwarding.left_out if forwarding else (),
        env_forward=forwarding.mode if forwarding else "all")
