"""The rank environment contract, built by one function.

Stdlib only and free of gcurun imports: the MPI rank shim imports it on every rank start.
"""

from __future__ import annotations

# (GCURUN name, Horovod twin) for each per-rank fact.
RANK_FACTS = ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "HOSTNAME")
GCURUN_PREFIX = "GCURUN_"
HOROVOD_PREFIX = "HOROVOD_"

SECRET_VARIABLE = "GCURUN_SECRET"
RENDEZVOUS_VARIABLE = "GCURUN_RENDEZVOUS"
# An address of the launcher given as ``*:PORT`` means "the launcher's address as seen
# from the rank's host"; the executors fill it in per host.
ANY_ADDRESS = "*"


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
) -> dict[str, str]:
    """Every variable that tells one rank who it is: GCURUN_*, their HOROVOD_* twins,
    torch's RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/GROUP_RANK/MASTER_ADDR/MASTER_PORT,
    the accelerator's device variable (when there is one and a device) and
    PYTHONUNBUFFERED so Python ranks stream their output."""
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
    if device_var and device is not None:
        env[device_var] = device
    return env
