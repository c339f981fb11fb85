"""One rank of a 2-process job of another framework, its variables set by hand or by
gcurun: ``contract_rank.py paddle|jax``. Prints one JSON line: the rank, the sum of an all-reduce
of rank+1 over all ranks, and (rank 0) the TCP ports this process listens on."""

from __future__ import annotations

import json
import os
import sys

import psutil


def listening() -> list[int]:
    return sorted({c.laddr.port for c in psutil.Process().net_connections("tcp")
                   if c.status == psutil.CONN_LISTEN})


def paddle_rank() -> dict:
    import paddle
    import paddle.distributed as dist

    dist.init_parallel_env()
    x = paddle.to_tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(x)
    return {"rank": dist.get_rank(), "size": dist.get_world_size(),
            "sum": float(x.numpy()[0]), "listening": listening()}


def jax_rank() -> dict:
    import jax
    import jax.numpy as jnp

    args = {}
    if "CONTRACT_NUM_PROCESSES" in os.environ:
        args = {"num_processes": int(os.environ["CONTRACT_NUM_PROCESSES"]),
                "process_id": int(os.environ["CONTRACT_PROCESS_ID"])}
    elif os.environ.get("CONTRACT_IDS_FROM") == "torch":
        # What a script does under a launcher JAX does not detect (gcurun's own).
        args = {"num_processes": int(os.environ["WORLD_SIZE"]),
                "process_id": int(os.environ["RANK"])}
    jax.distributed.initialize(**args)
    local = jnp.full((jax.local_device_count(), 1), float(jax.process_index() + 1))
    total = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(local)
    result = {"rank": jax.process_index(), "size": jax.process_count(),
              "sum": float(total[0][0]), "listening": listening()}
    jax.distributed.shutdown()
    return result


print(json.dumps({"paddle": paddle_rank, "jax": jax_rank}[sys.argv[1]]()), flush=True)
