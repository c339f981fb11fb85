"""One local Ray for every test of tests/ray that needs one, shut down at the end.

It offers the resources ``node:host-a`` .. ``node:host-d`` besides its own node's: the
elastic tests place workers on these four named "hosts" (all on this node), as Horovod's
own elastic tests do."""

from __future__ import annotations

import pytest

FAKE_HOSTS = ("host-a", "host-b", "host-c", "host-d")


@pytest.fixture(scope="session")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             resources={f"node:{host}": 1 for host in FAKE_HOSTS})
    try:
        yield ray
    finally:
        ray.shutdown()
