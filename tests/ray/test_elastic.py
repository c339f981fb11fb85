"""Elastic jobs on a real local Ray (``RayExecutor(min_workers=...)``): a host leaving and
one joining through discovery, a worker's actor killed mid-training, and the job
finishing from the last commit with every survivor holding the same parameters.

The hosts are names (``host-a`` ...) that the tests' Ray offers as ``node:<name>``
resources (tests/ray/conftest.py); discovery reads them from a file the training
function rewrites at fixed epochs, so each change happens at a known step."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from gcurun.ray import HostDiscovery, RayElasticJobFailed, RayExecutor  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.integration]

EPOCHS = 9
WAIT_SECONDS = 120


class FileDiscovery(HostDiscovery):
    """The hosts listed in a file, ``host:slots`` comma-separated."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def find_available_hosts_and_slots(self) -> dict[str, int]:
        text = self.path.read_text().strip()
        return {item.split(":")[0]: int(item.split(":")[1]) for item in text.split(",")}


def _train(hosts_file: str, killed_marker: str):
    """Every epoch adds the mean of ones over the ranks (1.0 at any size) to ``w``, so a
    job that lost or repeated no step ends with w == EPOCHS. Epoch 2: host-c leaves;
    epoch 4: host-d joins; epoch 6: host-b's worker is killed (once)."""
    import numpy as np

    import gcurun.runtime as hvd
    from gcurun.runtime.elastic import ObjectState, run

    hvd.init()
    state = ObjectState(epoch=0, w=0.0, sizes=[])

    def wait_for_size(want: int) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while hvd.size() != want:
            assert time.monotonic() < deadline, f"the job never reached {want} ranks"
            time.sleep(0.05)
            state.commit()          # raises once the driver says the hosts changed

    @run
    def train(state):
        while state.epoch < EPOCHS:
            # Every rank commits while it waits: a commit is collective.
            if state.epoch == 2:
                if hvd.rank() == 0:
                    Path(hosts_file).write_text("host-a:1,host-b:1")
                wait_for_size(2)
            if state.epoch == 4:
                if hvd.rank() == 0:
                    Path(hosts_file).write_text("host-a:1,host-b:1,host-d:1")
                wait_for_size(3)
            if state.epoch == 6 and os.environ["GCURUN_HOSTNAME"] == "host-b" \
                    and not os.path.exists(killed_marker):
                Path(killed_marker).write_text("killed")
                os.kill(os.getpid(), signal.SIGKILL)
            mean = hvd.allreduce(np.ones(1), name="step")
            state.w += float(mean[0])
            state.sizes = state.sizes + [hvd.size()]
            state.epoch += 1
            state.commit()
        return {"w": state.w, "size": hvd.size(), "host": os.environ["GCURUN_HOSTNAME"],
                "sizes": state.sizes}

    return train(state)


def _alive_actors() -> set[str]:
    """The actors of this Ray that are not dead (its GCS's table; no dashboard needed)."""
    from ray._private.state import actors

    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        alive = {a for a, info in actors().items() if info["State"] != "DEAD"}
        pending = {a for a in alive if actors()[a]["State"] != "ALIVE"}
        if not pending or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def test_hosts_leave_and_join_and_a_killed_worker_is_survived(local_ray, tmp_path):
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text("host-a:1,host-b:1,host-c:1")
    before = _alive_actors()
    settings = RayExecutor.create_settings(timeout_s=60)
    settings.discovery = FileDiscovery(hosts_file)
    executor = RayExecutor(settings, min_workers=1, max_workers=3, override_discovery=False,
                           elastic_timeout=60)
    executor.start()
    logged = []
    results = executor.run(_train, args=[str(hosts_file), str(tmp_path / "killed")],
                           callbacks=[logged.append])
    executor.shutdown()
    # host-a and host-d finished; host-c was removed, host-b killed.
    assert sorted(r["host"] for r in results) == ["host-a", "host-d"]
    assert [r["w"] for r in results] == [float(EPOCHS)] * 2
    assert results[0]["sizes"] == results[1]["sizes"]
    assert results[0]["sizes"][:2] == [3, 3] and results[0]["sizes"][-1] == 2
    assert (tmp_path / "killed").exists()
    assert _alive_actors() == before


def _raise_on_every_worker():
    raise ValueError("cannot train")


@pytest.mark.long
def test_a_function_that_fails_everywhere_fails_the_job(local_ray, tmp_path):
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text("host-a:1,host-b:1")
    settings = RayExecutor.create_settings(timeout_s=30)
    settings.discovery = FileDiscovery(hosts_file)
    executor = RayExecutor(settings, min_workers=2, override_discovery=False,
                           elastic_timeout=30)
    executor.start()
    with pytest.raises(RayElasticJobFailed, match="every worker of generation 1 failed") as err:
        executor.run(_raise_on_every_worker)
    assert isinstance(err.value, RuntimeError)
    assert isinstance(err.value.__cause__, ValueError)
    executor.shutdown()
