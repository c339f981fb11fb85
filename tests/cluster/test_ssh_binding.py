"""Binding of SSH-launched ranks: the topology of each namespace host is read over SSH
after the preflight and the ranks there run on their planned CPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.helpers import ROOT, gcurun_cmd, run_gcurun

pytest.importorskip("tests.cluster.netns", reason="the namespace-host fixture is not here")
pytestmark = [pytest.mark.cluster, pytest.mark.integration]

RANK = str(Path(__file__).resolve().parent / "rank_report.py")
CORES = len(os.sched_getaffinity(0))   # the namespace hosts share this machine's CPUs


def ssh_args(cluster):
    return ["--ssh-config", str(cluster.ssh_config), "--grace-seconds", "3"]


def test_remote_ranks_run_on_their_planned_cpus(netns_cluster, tmp_path):
    np = min(CORES, 2)
    go = tmp_path / "go"
    proc = subprocess.Popen(
        gcurun_cmd("-H", f"h1:{np},h2:{np}", *ssh_args(netns_cluster), "--bind-to", "core",
                   "--report-bindings", "-x", f"GO_FILE={go}", sys.executable, RANK),
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    reports = {}
    try:
        while len(reports) < 2 * np:
            line = proc.stdout.readline()
            assert line, f"gcurun ended early: {proc.stderr.read()}"
            prefix, _, rest = line.partition(" ")
            if rest.startswith("{"):
                reports[int(prefix.strip("[]"))] = json.loads(rest)
        actual = {r: set(psutil.Process(rep["pid"]).cpu_affinity())
                  for r, rep in reports.items()}
        go.write_text("")
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    for rank, rep in reports.items():
        assert rep["hostname"] == ("h1" if rank < np else "h2")
        assert actual[rank] == {rank % np}                 # core k for local rank k
        assert rep["affinity"] == [rank % np]
    table = [line.split() for line in err.splitlines() if line[:1].isdigit()]
    assert [(row[0], row[1], row[-1]) for row in table] == [
        (str(r), "h1" if r < np else "h2", str(r % np)) for r in range(2 * np)]


def test_too_many_remote_ranks_for_the_cores_is_refused(netns_cluster):
    res = run_gcurun("-H", f"h1:{CORES + 1}", *ssh_args(netns_cluster), "--bind-to", "core",
                     "python3", "-c", "pass")
    assert res.returncode == 2, res.stderr
    assert (f"--bind-to core on h1: NUMA node 0 gets {CORES + 1} ranks" in res.stderr
            and f"{CORES + 1} ranks > {CORES} cores" in res.stderr), res.stderr


def test_dry_run_defers_remote_bindings_to_the_preflight(netns_cluster):
    res = run_gcurun("-H", "localhost:1,h1:1", *ssh_args(netns_cluster), "--bind-to", "numa",
                     "--report-bindings", "--dry-run", "python3", "x.py")
    assert res.returncode == 0, res.stderr
    rows = [line.split(maxsplit=4) for line in res.stderr.splitlines() if line[:1].isdigit()]
    assert rows[0][1] == "localhost" and rows[0][3] == "0"
    assert rows[1][1:] == ["h1", "0", "-", "after the ssh preflight"]


def test_dry_run_with_preflight_shows_remote_bindings_and_leaves_no_bootstrap(netns_cluster):
    from tests.cluster.test_ssh_cluster import bootstraps

    args = ["-H", "localhost:1,h1:1,h2:1", *ssh_args(netns_cluster), "--bind-to", "core",
            "--dry-run", "--preflight"]
    res = run_gcurun(*args, "--report-bindings", "python3", "x.py")
    assert res.returncode == 0, res.stderr
    rows = [line.split() for line in res.stderr.splitlines() if line[:1].isdigit()]
    assert [(row[0], row[1], row[-1]) for row in rows] == [
        ("0", "localhost", "0"), ("1", "h1", "0"), ("2", "h2", "0")]
    plan = json.loads(run_gcurun(*args, "--json", "python3", "x.py").stdout)
    assert [(r["host"], r["binding"]["cpus"], {**plan["env"], **r["env"]}["OMP_NUM_THREADS"])
            for r in plan["ranks"]] == [("localhost", [0], "1"), ("h1", [0], "1"),
                                        ("h2", [0], "1")]
    assert bootstraps(netns_cluster) == []


def test_dry_run_with_preflight_reports_an_unreachable_host_as_a_run_does(netns_cluster,
                                                                         tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(f"Host ghost\n  HostName {netns_cluster.subnet_prefix}.251\n\n"
                      + netns_cluster.ssh_config.read_text())
    hosts = ["-np", "2", "-H", "h1:1,ghost:1", "--ssh-config", str(config),
             "--ssh-timeout", "1.5"]
    checked = run_gcurun(*hosts, "--dry-run", "--preflight", "true", timeout=60)
    ran = run_gcurun(*hosts, "true", timeout=60)
    assert checked.returncode == ran.returncode == 1
    assert checked.stderr.startswith(
        "gcurun: error: SSH preflight failed for 1 host; nothing was started:\n  ghost: ")
    address = f"{netns_cluster.subnet_prefix}.251"
    for res in (checked, ran):   # the bridge answers with a timeout or "no route"
        first, reason = res.stderr.splitlines()[:2]
        assert first == "gcurun: error: SSH preflight failed for 1 host; nothing was started:"
        assert reason.startswith((f"  ghost: no answer from {address} port 22 within 1.5 s",
                                  f"  ghost: no route to {address}")), reason
    assert checked.stdout == ""


def test_dry_run_alone_connects_to_no_host(netns_cluster, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(f"Host ghost\n  HostName {netns_cluster.subnet_prefix}.251\n")
    res = run_gcurun("-H", "ghost:2", "--ssh-config", str(config), "--ssh-timeout", "30",
                     "--dry-run", "--json", "true", timeout=60)
    assert res.returncode == 0, res.stderr
    assert [r["host"] for r in json.loads(res.stdout)["ranks"]] == ["ghost", "ghost"]
