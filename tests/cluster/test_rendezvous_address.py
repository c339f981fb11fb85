"""The rendezvous of an SSH job listens only on the address its ranks are given."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import psutil
import pytest

from tests.helpers import ROOT, gcurun_cmd, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

RANK = ("import os, time; print(os.environ['GCURUN_RENDEZVOUS'], flush=True)\n"
        "while not os.path.exists(os.environ['GO_FILE']): time.sleep(0.05)\n")


def listening_on(port: int) -> set[str]:
    return {c.laddr.ip for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port}


@pytest.mark.parametrize("hosts, local", [("h1:1,h2:1", False), ("localhost:1,h2:1", True)])
def test_the_rendezvous_listens_only_where_the_ranks_are_told_to_connect(
        netns_cluster, tmp_path, hosts, local):
    go = tmp_path / "go"
    proc = subprocess.Popen(
        gcurun_cmd("-H", hosts, "--ssh-config", str(netns_cluster.ssh_config),
                   "-x", f"GO_FILE={go}", sys.executable, "-c", RANK),
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True).start()
    try:
        wait_for("both ranks to print their rendezvous", lambda: len(lines) == 2, 60)
        given = {line.split(" ", 1)[1].strip() for line in lines}
        port = int(next(iter(given)).rsplit(":", 1)[1])
        expected = {netns_cluster.gateway} | ({"127.0.0.1"} if local else set())
        assert given == {f"{address}:{port}" for address in expected}
        assert listening_on(port) == expected
    finally:
        go.touch()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
