"""gcurun.ray on a Ray cluster of three namespace hosts (``ray start --head`` on h1,
workers on h2 and h3, on the bridge's addresses): a job across three nodes, and an
elastic job that takes a node added mid-training and survives a node whose raylet is
killed, finishing on the others with the same parameters. After each test no Ray
process is left on any host.

Marked long: each Ray node takes tens of seconds to start on a small shared machine."""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray")

from tests.cluster.netns import NetnsCluster  # noqa: E402
from tests.cluster.ray_nodes import (  # noqa: E402
    HEAD_PORT,
    kill_raylet,
    ray_environment,
    ray_processes,
    start_node,
    stop_node,
)
from tests.helpers import ROOT  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.ray,
              pytest.mark.long]

JOB_SECONDS = 900.0
EPOCHS = 8


class Nodes:
    """The Ray nodes this test started; :meth:`stop` stops them all and says what is left."""

    def __init__(self, cluster: NetnsCluster, temp_dir: Path) -> None:
        self.cluster, self.temp_dir = cluster, temp_dir
        self.head = cluster.host("h1")
        self.times: dict[str, float] = {}

    def start(self, name: str) -> None:
        host = self.cluster.host(name)
        began = time.monotonic()
        start_node(host, self.temp_dir, str(ROOT), cpus=2,
                   head=None if host == self.head else self.head)
        self.times[f"start {name}"] = time.monotonic() - began

    def stop(self) -> dict[str, list[int]]:
        return {h.name: stop_node(h) for h in self.cluster.hosts}


@pytest.fixture
def nodes(netns_cluster: NetnsCluster) -> Iterator[Nodes]:
    leftover = {h.name: ray_processes(h) for h in netns_cluster.hosts}
    assert not any(leftover.values()), f"Ray processes before the test: {leftover}"
    # Ray's socket paths live under its temp dir and may not exceed 107 bytes.
    temp_dir = Path(tempfile.mkdtemp(prefix="gray-", dir="/tmp"))
    started = Nodes(netns_cluster, temp_dir)
    try:
        yield started
    finally:
        left = started.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)
        sys.stderr.write(f"ray cluster times: {started.times}\n")
        assert not any(left.values()), f"Ray processes left behind: {left}"


class Driver:
    """``tests.cluster.ray_driver`` run inside h1; its EVENT and RESULT lines as they come."""

    def __init__(self, nodes: Nodes, scenario: str) -> None:
        head = nodes.head
        self.lines: queue.Queue[str] = queue.Queue()
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", head.netns, sys.executable, "-m", "tests.cluster.ray_driver",
             scenario, f"{head.address}:{HEAD_PORT}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(ROOT),
            env=ray_environment(str(ROOT)))
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.deadline = time.monotonic() + JOB_SECONDS

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            self.lines.put(line)
        self.lines.put("")

    def next(self, kind: str) -> object:
        """The next ``kind`` line's value. Fails when the driver ends or runs too long."""
        while True:
            left = self.deadline - time.monotonic()
            assert left > 0, "the driver ran too long:\n" + "".join(self.output[-30:])
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            assert line, "the driver ended:\n" + "".join(self.output[-30:])
            if line.startswith(kind + " "):
                return json.loads(line[len(kind) + 1:])

    def until(self, key: str, value: int) -> None:
        """Wait for an EVENT whose ``key`` is at least ``value``."""
        while self.next("EVENT")[key] < value:  # type: ignore[index]
            pass

    def close(self) -> int:
        try:
            return self.process.wait(timeout=60)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()


def test_a_job_spans_three_ray_nodes(nodes: Nodes) -> None:
    for name in ("h1", "h2", "h3"):
        nodes.start(name)
    began = time.monotonic()
    driver = Driver(nodes, "static")
    results = driver.next("RESULT")
    assert driver.close() == 0
    nodes.times["job"] = time.monotonic() - began
    addresses = {h.address for h in nodes.cluster.hosts}
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert {r["node_ip"] for r in results} == addresses
    assert {r["host"] for r in results} == addresses
    assert {(r["local_rank"], r["cross_size"]) for r in results} == {(0, 3)}
    assert sorted(r["cross_rank"] for r in results) == [0, 1, 2]
    assert {r["sum"] for r in results} == {6.0}


def test_an_elastic_job_takes_an_added_node_and_survives_a_killed_raylet(nodes: Nodes) -> None:
    nodes.start("h1")
    nodes.start("h2")
    began = time.monotonic()
    driver = Driver(nodes, "elastic")
    driver.until("epoch", 2)
    nodes.start("h3")                                         # a node joins the cluster
    driver.until("size", 3)
    nodes.times["joined"] = time.monotonic() - began
    driver.until("epoch", 4)
    assert kill_raylet(nodes.cluster.host("h2"))              # h2's node dies
    killed = time.monotonic()
    results = driver.next("RESULT")
    assert driver.close() == 0
    nodes.times["after the kill"] = time.monotonic() - killed
    nodes.times["job"] = time.monotonic() - began
    survivors = {nodes.cluster.host("h1").address, nodes.cluster.host("h3").address}
    assert {r["node_ip"] for r in results} == survivors     # type: ignore[index]
    assert [r["w"] for r in results] == [float(EPOCHS)] * 2  # type: ignore[index]
    assert {r["size"] for r in results} == {2}               # type: ignore[index]
