"""The driver of a Ray job on namespace hosts (run inside the head's host):

    python -m tests.cluster.ray_driver static|elastic HEAD_ADDRESS

It joins the Ray cluster at HEAD_ADDRESS and prints one line per event the test waits
for (``EVENT {json}``) and the job's results last (``RESULT {json}``)."""

from __future__ import annotations

import json
import os
import sys
import time

import ray

from gcurun.ray import RayExecutor

EPOCHS = 8
WAIT_SECONDS = 240


def say(kind: str, value: object) -> None:
    print(f"{kind} {json.dumps(value)}", flush=True)


def where() -> dict:
    import numpy as np

    import gcurun.runtime as hvd

    hvd.init()
    total = hvd.allreduce(np.array([float(hvd.rank() + 1)]), op=hvd.Sum, name="sum")
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
            "cross_rank": hvd.cross_rank(), "cross_size": hvd.cross_size(),
            "host": os.environ["GCURUN_HOSTNAME"], "node_ip": ray.util.get_node_ip_address(),
            "sum": float(total[0])}


def static() -> list:
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_workers=3,
                           placement_strategy="STRICT_SPREAD")
    executor.start()
    try:
        return executor.run(where)
    finally:
        executor.shutdown()


def train() -> dict:
    """Each epoch adds the mean of ones (1.0 at any size) to ``w``: a job that lost or
    repeated no step ends with w == EPOCHS. At epoch 2 the ranks wait for a third
    worker (the test adds a node), at epoch 4 for the job to change (the test kills a
    node's raylet)."""
    import numpy as np

    import gcurun.runtime as hvd
    from gcurun.ray import ray_logger
    from gcurun.runtime.elastic import ObjectState, run

    hvd.init()
    state = ObjectState(epoch=0, w=0.0)

    def wait_while(condition) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while condition():
            assert time.monotonic() < deadline, "the job did not change"
            time.sleep(0.05)
            state.commit()

    @run
    def loop(state):
        while state.epoch < EPOCHS:
            if hvd.rank() == 0:
                ray_logger.log({"epoch": state.epoch, "size": hvd.size()})
            if state.epoch == 2:
                wait_while(lambda: hvd.size() < 3)
            if state.epoch == 4:
                wait_while(lambda: hvd.size() == 3)
            state.w += float(hvd.allreduce(np.ones(1), name="step")[0])
            state.epoch += 1
            state.commit()
        return {"w": state.w, "size": hvd.size(), "rank": hvd.rank(),
                "node_ip": ray.util.get_node_ip_address()}

    return loop(state)


def elastic() -> list:
    settings = RayExecutor.create_settings(timeout_s=120)
    executor = RayExecutor(settings, min_workers=2, max_workers=3, cpus_per_worker=2,
                           elastic_timeout=240)
    executor.start()
    try:
        return executor.run(train, callbacks=[lambda value: say("EVENT", value)])
    finally:
        executor.shutdown()


def main() -> None:
    scenario, address = sys.argv[1], sys.argv[2]
    ray.init(address=address, log_to_driver=False)
    try:
        say("RESULT", {"static": static, "elastic": elastic}[scenario]())
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
