"""Elastic jobs of real processes on three local "hosts" (localhost, 127.0.0.1 and
127.0.0.2 are this machine, but distinct hosts to the driver)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, gcurun_cmd, run_gcurun

pytestmark = pytest.mark.integration

SCRIPT = str(ROOT / "tests" / "ranks" / "elastic_numpy.py")
HOSTS = "localhost:1,127.0.0.1:1,127.0.0.2:1"


def lines(out: str) -> list[dict]:
    found = []
    for line in out.splitlines():
        _, _, body = line.partition("] ")
        if body.startswith("{"):
            found.append(json.loads(body))
    return found


def finals(out: str) -> list[dict]:
    return [r for r in lines(out) if r.get("done")]


def events(directory: Path) -> list[dict]:
    text = (directory / "latest" / "elastic-events.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("how", ["--kill-at", "--fail-at"])
def test_a_worker_dying_mid_run_leaves_the_job_on_two_hosts(tmp_path, how):
    done = run_gcurun("--min-np", "2", "-H", HOSTS, "--output-dir", str(tmp_path),
                      sys.executable, SCRIPT, "30", how, "10:2")
    assert done.returncode == 0, done.stderr
    ends = finals(done.stdout)
    assert sorted(r["rank"] for r in ends) == [0, 1]
    assert {r["size"] for r in ends} == {2} and {r["step"] for r in ends} == {30}
    assert len({r["hash"] for r in ends}) == 1
    steps = [r["step"] for r in lines(done.stdout) if "step" in r and "done" not in r]
    assert steps == list(range(1, 31))        # no committed step lost or repeated
    assert "host 127.0.0.2 blacklisted" in done.stderr
    log = events(tmp_path)
    gens = [e for e in log if e["event"] == "generation"]
    assert [(g["generation"], g["size"], g["sync"]) for g in gens] == [(1, 3, True),
                                                                        (2, 2, True)]
    assert gens[1]["hosts"] == "localhost:1,127.0.0.1:1"
    assert [e["host"] for e in log if e["event"] == "blacklist"] == ["127.0.0.2"]


def test_reset_limit_zero_ends_the_job_on_the_first_failure():
    done = run_gcurun("--min-np", "2", "-H", HOSTS, "--reset-limit", "0",
                      sys.executable, SCRIPT, "30", "--kill-at", "5:1")
    assert done.returncode == 1
    assert "a reset was needed but the job was reset 0 times already, the --reset-limit" \
        in done.stderr


def test_below_min_np_for_the_elastic_timeout_fails_with_the_min_np_message():
    # The elastic timeout also bounds each generation's forming: 10 s lets three ranks
    # start on a loaded machine (3 s did not always).
    done = run_gcurun("--min-np", "3", "-H", HOSTS, "--elastic-timeout", "10",
                      sys.executable, SCRIPT, "30", "--kill-at", "5:1")
    assert done.returncode == 1
    assert ("timed out waiting for the minimum number of slots: only 2 available "
            "(localhost:1, 127.0.0.2:1; 127.0.0.1 blacklisted (worker 1 failed)) but "
            "--min-np is 3, for the whole --elastic-timeout of 10 s") in done.stderr


def test_a_discovered_host_joins_and_the_size_grows(tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("localhost:1\n127.0.0.1:1\n")
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {hosts}\n")
    script.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        gcurun_cmd("--host-discovery-script", str(script), "--min-np", "2",
                   "--output-dir", str(tmp_path / "out"), sys.executable, SCRIPT, "40",
                   "--sleep", "0.1", "--reset-log"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    out = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            if '"step": 5,' in line:
                hosts.write_text("localhost:1\n127.0.0.1:1\n127.0.0.2:1\n")
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stdout = "".join(out)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    ends = finals(stdout)
    assert sorted(r["rank"] for r in ends) == [0, 1, 2]
    assert {r["size"] for r in ends} == {3} and len({r["hash"] for r in ends}) == 1
    resets = [r for r in lines(stdout) if r.get("reset")]
    assert {r["size"] for r in resets} == {3} and len(resets) == 2    # survivors only
    log = events(tmp_path / "out")
    kinds = [e["event"] for e in log]
    # the new worker joined before the members were told to re-form (pre-warmed)
    assert kinds.index("worker_joined") < kinds.index("hosts_updated")
    gens = [e for e in log if e["event"] == "generation"]
    assert [(g["size"], g["hosts"]) for g in gens] == [
        (2, "localhost:1,127.0.0.1:1"), (3, "localhost:1,127.0.0.1:1,127.0.0.2:1")]


def test_thirty_resets_in_one_process_leak_no_descriptors_or_threads():
    done = run_gcurun("--min-np", "2", "-H", "localhost:1,127.0.0.1:1",
                      sys.executable, str(ROOT / "tests" / "ranks" / "elastic_resets.py"),
                      "30", timeout=300)
    assert done.returncode == 0, done.stderr
    reports = lines(done.stdout)
    assert len(reports) == 2
    for report in reports:
        held = report["held"]
        assert len(held) == 30
        # after the first reset every later one holds exactly as much
        assert {tuple(h) for h in held[1:]} == {tuple(held[0])}, held
