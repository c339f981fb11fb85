"""The rank environment contract, built by one function.

Stdlib only and free of gcurun imports: the MPI rank shim imports it on every rank start.

Besides gcurun's own names (and Horovod's and torch's), every rank gets what Paddle's
and JAX's distributed modes read (docs/frameworks.md), so ``paddle.distributed``'s
``init_parallel_env()`` and ``jax.distributed.initialize()`` find their job under gcurun
as under their own launchers. One port serves every framework's rendezvous on rank 0's
host (``MASTER_PORT``): a script uses one framework's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gcurun.rendezvous.wire import show_address

# (GCURUN name, Horovod twin) for each per-rank fact.
RANK_FACTS = ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "HOSTNAME")
GCURUN_PREFIX = "GCURUN_"
HOROVOD_PREFIX = "HOROVOD_"

SECRET_VARIABLE = "GCURUN_SECRET"
# The rank's own device id, whatever its device variable lists.
DEVICE_VARIABLE = "GCURUN_DEVICE"
RENDEZVOUS_VARIABLE = "GCURUN_RENDEZVOUS"
# An address of the launcher given as ``*:PORT`` means "the launcher's address as seen
# from the rank's host"; the executors fill it in per host.
ANY_ADDRESS = "*"

PADDLE_ENDPOINTS_VARIABLE = "PADDLE_TRAINER_ENDPOINTS"
# Paddle's name for each accelerator's device variable: (device kind in FLAGS_selected_*,
# whether Paddle drives it through a custom-device plugin and its xccl backend).
PADDLE_DEVICES: Mapping[str, tuple[str, bool]] = {
    "TOPS_VISIBLE_DEVICES": ("gcu", True),
    "CUDA_VISIBLE_DEVICES": ("gpu", False),
    "ROCR_VISIBLE_DEVICES": ("gpu", False),
    "ASCEND_RT_VISIBLE_DEVICES": ("npu", True),
    "MLU_VISIBLE_DEVICES": ("mlu", True),
}

# Every variable whose value differs from rank to rank: launchers that give all ranks one
# environment (mpirun, srun) leave these to the rank shim.
PER_RANK_VARIABLES = frozenset(
    [GCURUN_PREFIX + f for f in RANK_FACTS] + [HOROVOD_PREFIX + f for f in RANK_FACTS]
    + ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
       "OMP_NUM_THREADS", "PADDLE_TRAINER_ID", "PADDLE_GLOBAL_RANK", "PADDLE_LOCAL_RANK",
       "PADDLE_RANK_IN_NODE", "PADDLE_LOCAL_SIZE", "PADDLE_CURRENT_ENDPOINT",
       "PADDLE_DISTRI_BACKEND", "PADDLE_XCCL_BACKEND", "JAX_LOCAL_DEVICE_IDS", DEVICE_VARIABLE]
    + sorted({f"FLAGS_selected_{kind}s" for kind, _ in PADDLE_DEVICES.values()}))


def endpoint_port(port: int, local_rank: int) -> int:
    """The port of a rank's own Paddle endpoint: the ports after the job's ``port``, one
    per local rank (below it where that would pass 65535)."""
    above = port + 1 + local_rank
    return above if above <= 65535 else port - 1 - local_rank


def paddle_endpoints(hosts: Sequence[str], counts: Sequence[int], port: int) -> list[str]:
    """Every rank's Paddle endpoint in rank order, for ``counts[i]`` ranks on ``hosts[i]``
    (ranks placed host by host)."""
    return [show_address((host, endpoint_port(port, local)))
            for host, count in zip(hosts, counts, strict=True) for local in range(count)]


# The kernel refuses to start a program with one environment string (NAME=value) longer
# than this (MAX_ARG_STRLEN, 32 pages): a longer endpoint list could reach no rank.
LONGEST_VARIABLE = 131072 - 1


class Endpoints:
    """Paddle's endpoints of a job: each rank's, and the list every rank gets, joined once
    (a job of N ranks would otherwise join N endpoints N times). ``joined`` is None when
    the list is longer than the kernel lets one variable be (about 8,000 ranks): such a
    job's ranks get their own endpoint but no list."""

    def __init__(self, listing: Sequence[str]) -> None:
        self.listing = listing
        joined = ",".join(listing)
        fits = len(PADDLE_ENDPOINTS_VARIABLE) + 1 + len(joined) <= LONGEST_VARIABLE
        self.joined = joined if fits else None


class DeviceList:
    """The devices a host's ranks see, and the device variable's value, joined once (a
    host of N ranks would otherwise join its list N times)."""

    def __init__(self, ids: Sequence[str]) -> None:
        self.ids = tuple(ids)
        self.joined = ",".join(self.ids)


def rank_environment(
    *,
    rank: int,
    size: int,
    local_rank: int,
    local_size: int,
    cross_rank: int,
    cross_size: int,
    node_rank: int,
    hostname: str,
    master_addr: str,
    master_port: int,
    device_var: str | None,
    device: str | None,
    visible_devices: DeviceList | Sequence[str] | None = None,
    node_count: int | None = None,
    endpoints: Endpoints | None = None,
) -> dict[str, str]:
    """Every variable that tells one rank who it is: GCURUN_*, their HOROVOD_* twins,
    torch's RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/GROUP_RANK/MASTER_ADDR/MASTER_PORT,
    the accelerator's device variable and GCURUN_DEVICE (when there is one and a device),
    Paddle's and JAX's variables (see :func:`framework_environment`) and PYTHONUNBUFFERED
    so Python ranks stream their output.

    ``device`` is the rank's own device id (GCURUN_DEVICE); ``visible_devices`` what the
    device variable lists, the devices of the rank's host in local-rank order (so index
    LOCAL_RANK is ``device``; a :class:`DeviceList` the host's ranks share), or None for
    one-device-per-rank isolation (the variable lists ``device`` alone, index 0).
    ``node_count`` is the number of hosts of the job (default: ``cross_size``);
    ``endpoints`` every rank's Paddle endpoint (:class:`Endpoints`), when known.

    Raises ValueError when ``visible_devices`` does not list ``device``.
    """
    facts = {
        "RANK": rank,
        "SIZE": size,
        "LOCAL_RANK": local_rank,
        "LOCAL_SIZE": local_size,
        "CROSS_RANK": cross_rank,
        "CROSS_SIZE": cross_size,
        "HOSTNAME": hostname,
    }
    env: dict[str, str] = {}
    for name in RANK_FACTS:
        env[GCURUN_PREFIX + name] = str(facts[name])
        env[HOROVOD_PREFIX + name] = str(facts[name])
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(size),
        LOCAL_RANK=str(local_rank),
        LOCAL_WORLD_SIZE=str(local_size),
        GROUP_RANK=str(node_rank),
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
        PYTHONUNBUFFERED="1",
    )
    index = 0
    if device_var and device is not None:
        if visible_devices is None:
            visible_devices = (device,)
        if not isinstance(visible_devices, DeviceList):
            visible_devices = DeviceList(visible_devices)
        index = device_index(visible_devices.ids, device, local_rank)
        env[device_var] = visible_devices.joined
        env[DEVICE_VARIABLE] = device
    env.update(framework_environment(
        rank=rank, size=size, local_rank=local_rank, local_size=local_size,
        node_count=cross_size if node_count is None else node_count,
        master=show_address((master_addr, master_port)),
        device_var=device_var if device is not None else None, endpoints=endpoints,
        device_index=index))
    return env


def device_index(visible: Sequence[str], device: str, local_rank: int) -> int:
    """Where ``device`` is in the ``visible`` list: at ``local_rank`` when it is there
    (a host's list in local-rank order), else its first place. Raises ValueError when
    the list lacks it."""
    if local_rank < len(visible) and visible[local_rank] == device:
        return local_rank
    if device not in visible:
        raise ValueError(f"device {device!r} is not among the visible devices "
                         f"{','.join(visible)!r}")
    return visible.index(device)


def framework_environment(*, rank: int, size: int, local_rank: int, local_size: int,
                          node_count: int, master: str, device_var: str | None,
                          endpoints: Endpoints | None, device_index: int = 0) -> dict[str, str]:
    """What ``paddle.distributed.launch`` would set for this rank, and JAX's coordinator.

    Paddle: trainer id and count (and their GLOBAL_ twins), local rank and size, hosts,
    the store at ``master`` (PADDLE_MASTER), the endpoints when known; on a device, its
    ``device_index`` in the visible list (``FLAGS_selected_gpus=1``: the rank's device is
    the second its device variable lists) and, for plugin devices (GCU, Ascend, MLU), the
    xccl backend; without one, gloo.
    JAX: ``JAX_COORDINATOR_ADDRESS`` (the process count and id come from the script, or
    from Slurm's variables under srun) and, on a device, ``JAX_LOCAL_DEVICE_IDS``, the
    same index.
    """
    env = {
        "PADDLE_TRAINER_ID": str(rank),
        "PADDLE_GLOBAL_RANK": str(rank),
        "PADDLE_TRAINERS_NUM": str(size),
        "PADDLE_GLOBAL_SIZE": str(size),
        "PADDLE_LOCAL_RANK": str(local_rank),
        "PADDLE_RANK_IN_NODE": str(local_rank),
        "PADDLE_LOCAL_SIZE": str(local_size),
        "PADDLE_NNODES": str(node_count),
        "PADDLE_MASTER": master,
        "JAX_COORDINATOR_ADDRESS": master,
    }
    if endpoints is not None and rank < len(endpoints.listing):
        if endpoints.joined is not None:
            env[PADDLE_ENDPOINTS_VARIABLE] = endpoints.joined
        env["PADDLE_CURRENT_ENDPOINT"] = endpoints.listing[rank]
    paddle_device = PADDLE_DEVICES.get(device_var or "")
    if paddle_device is None:
        env["PADDLE_DISTRI_BACKEND"] = "gloo"
        return env
    kind, plugin = paddle_device
    env[f"FLAGS_selected_{kind}s"] = str(device_index)
    if plugin:
        env["PADDLE_DISTRI_BACKEND"] = "xccl"
        env["PADDLE_XCCL_BACKEND"] = kind
    env["JAX_LOCAL_DEVICE_IDS"] = str(device_index)
    return env
