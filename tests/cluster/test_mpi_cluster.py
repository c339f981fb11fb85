"""`gcurun --mpi` across namespace hosts: mpirun reaches them over SSH with the cluster's
ssh config, the ranks run inside their hosts and see gcurun's variables, and a failing or
interrupted job leaves nothing running on any host."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from tests.helpers import ROOT, gcurun_cmd, rank_reports, run_gcurun, wait_for

# The namespace-host fixture (conftest.py, netns.py) and rank_report.py come with the SSH
# launcher's tests; without them there is nothing to run on.
pytest.importorskip("tests.cluster.netns", reason="the namespace-host fixture is not here")

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.mpi,
              pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")]

RANK = str(Path(__file__).resolve().parent / "rank_report.py")


def mpi_args(cluster, *hosts):
    return ["--mpi", "-H", ",".join(hosts), "--ssh-config", str(cluster.ssh_config),
            "--network-interface", f"{cluster.subnet_prefix}.0/24", "--grace-seconds", "3"]


def with_token(token: str) -> list[psutil.Process]:
    """Live processes on every namespace host (they share our pid namespace) whose
    command line mentions ``token``."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
            continue
        if token in " ".join(p.info["cmdline"] or ()):
            found.append(p)
    return found


def nothing_left(token: str, timeout: float = 30.0) -> bool:
    try:
        wait_for(f"every process of job {token} to end", lambda: not with_token(token),
                 timeout)
    except AssertionError:
        return False
    return True


def test_ranks_run_inside_their_hosts_with_gcuruns_variables(netns_cluster):
    res = run_gcurun(*mpi_args(netns_cluster, "h1:2", "h2:2"), "-x", "TEST_TOKEN=t0",
                     sys.executable, RANK)
    assert res.returncode == 0, res.stderr
    got = rank_reports(res.stdout)
    assert sorted(got) == [0, 1, 2, 3]
    inodes = {h.name: h.net_namespace_inode() for h in netns_cluster.hosts}
    for rank, rep in got.items():
        host = "h1" if rank < 2 else "h2"
        env = rep["env"]
        assert rep["hostname"] == host and rep["netns"] == inodes[host]
        assert (env["GCURUN_RANK"], env["GCURUN_SIZE"], env["LOCAL_RANK"]) == \
            (str(rank), "4", str(rank % 2))
        assert (env["GCURUN_CROSS_RANK"], env["GCURUN_CROSS_SIZE"]) == (str(rank // 2), "2")
        assert env["GCURUN_HOSTNAME"] == host and env["HOROVOD_RANK"] == str(rank)
        assert env["MASTER_ADDR"] == "h1" and env["TEST_TOKEN"] == "t0"
        assert rep["cwd"] == str(ROOT)


def test_uneven_hosts_give_horovods_cross_ranks(netns_cluster):
    res = run_gcurun(*mpi_args(netns_cluster, "h1:1", "h2:2", "h3:2"), sys.executable, RANK)
    assert res.returncode == 0, res.stderr
    got = {r: (rep["hostname"], rep["env"]["LOCAL_RANK"], rep["env"]["GCURUN_CROSS_RANK"],
               rep["env"]["GCURUN_CROSS_SIZE"]) for r, rep in rank_reports(res.stdout).items()}
    assert got == {0: ("h1", "0", "0", "3"), 1: ("h2", "0", "1", "3"),
                   2: ("h2", "1", "0", "2"), 3: ("h3", "0", "2", "3"),
                   4: ("h3", "1", "1", "2")}


def test_a_failing_remote_rank_fails_the_job_and_nothing_survives(netns_cluster, tmp_path):
    token = uuid.uuid4().hex
    script = (f"if [ $RANK = 3 ]; then sleep 0.5; exit 9; fi; sleep 120 & "
              f"GO_FILE={tmp_path}/never exec {sys.executable} {RANK} {token}")
    res = run_gcurun(*mpi_args(netns_cluster, "h1:2", "h2:2"), "bash", "-c", script, token)
    assert res.returncode == 9, res.stderr
    assert "gcurun: job failed: rank 3 on h2 exited with code 9 (root cause)" in res.stderr
    assert nothing_left(token), [p.cmdline() for p in with_token(token)]


def test_ctrl_c_stops_ranks_on_every_host(netns_cluster, tmp_path):
    token = uuid.uuid4().hex
    go = tmp_path / "go"
    proc = subprocess.Popen(
        gcurun_cmd(*mpi_args(netns_cluster, "h1:2", "h2:2"), "-x", f"GO_FILE={go}",
                   sys.executable, RANK, token),
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        wait_for("four ranks on two hosts", lambda: len(
            # (the command lines read by the scan: a process may end meanwhile)
            [p for p in with_token(token) if "rank_report.py" in " ".join(p.info["cmdline"])
             and "mpi_shim" not in " ".join(p.info["cmdline"])]) >= 4)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert nothing_left(token), [p.cmdline() for p in with_token(token)]


def test_dry_run_names_the_hosts_and_the_ssh_config(netns_cluster):
    res = run_gcurun(*mpi_args(netns_cluster, "h1:2", "h2:2"), "--dry-run", "--json",
                     "python", "train.py")
    assert res.returncode == 0, res.stderr
    argv = json.loads(res.stdout)["mpirun"]["argv"]
    assert argv[argv.index("-H") + 1] == "h1:2,h2:2"
    assert argv[argv.index("plm_ssh_args") + 1] == f"-F {netns_cluster.ssh_config}"
