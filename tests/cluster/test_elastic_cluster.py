"""Elastic jobs on namespace hosts (one worker on each of h1..h3, over real SSH): a host
dies mid-epoch (its processes killed, or its link cut, which sends nothing), a host
added to the discovery output joins, a flapping host is blacklisted, the reset limit
ends a job; afterwards no process of the job is left on any host."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cluster.netns import NetnsCluster, link_down, link_up, processes_in
from tests.helpers import ROOT, gcurun_cmd

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

SCRIPT = str(ROOT / "tests" / "ranks" / "elastic_numpy.py")
BOOTSTRAP = "gcurun.launch.remote.bootstrap"
HOSTS = "h1:1,h2:1,h3:1"
LIVENESS = 3.0            # --liveness-timeout: a cut link is noticed in about this long
FENCE_SLACK = 5.0         # the bootstrap fences itself this long after the liveness timeout
JOB_SECONDS = 240.0       # the deadline of one job (this machine is small and shared)
STEPS = "60"


class Job:
    """One gcurun run, its stdout read line by line as it comes."""

    def __init__(self, cluster: NetnsCluster, tmp: Path, *args: str,
                 hosts: tuple[str, ...] = ("-H", HOSTS)) -> None:
        self.token = uuid.uuid4().hex
        self.out_dir = tmp / "out"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            gcurun_cmd(*hosts, "--ssh-config", str(cluster.ssh_config),
                       "--liveness-timeout", f"{LIVENESS:g}", "--output-dir",
                       str(self.out_dir), *args[:args.index("--")], sys.executable,
                       SCRIPT, *args[args.index("--") + 1:], "--tag", self.token),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stdout: list[str] = []
        self.stderr = ""
        threading.Thread(target=self._pump, daemon=True).start()
        self._stderr_reader = threading.Thread(target=self._pump_stderr, daemon=True)
        self._stderr_reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def wait_line(self, what: str, match: Callable[[str], bool],
                  timeout: float = JOB_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"the job ended before {what}: {self.stderr}")
            self.stdout.append(line)
            if match(line):
                return
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")

    def wait_step(self, step: int) -> None:
        self.wait_line(f"step {step}", lambda line: f'"step": {step},' in line)

    def finish(self) -> int:
        try:
            code = self.proc.wait(JOB_SECONDS)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(30)
        while (line := self.lines.get(timeout=30)) is not None:
            self.stdout.append(line)
        self._stderr_reader.join(30)
        return code

    def records(self) -> list[dict]:
        found = []
        for line in self.stdout:
            _, _, body = line.partition("] ")
            if body.startswith("{"):
                found.append(json.loads(body))
        return found

    def events(self) -> list[dict]:
        text = (self.out_dir / "latest" / "elastic-events.jsonl").read_text()
        return [json.loads(line) for line in text.splitlines()]


def job_processes(cluster: NetnsCluster, job: Job, host: str) -> list[int]:
    return processes_in(cluster.host(host), job.token, BOOTSTRAP)


def wait_no_process_left(cluster: NetnsCluster, job: Job, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        left = {h.name: job_processes(cluster, job, h.name) for h in cluster.hosts}
        left = {name: pids for name, pids in left.items() if pids}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert left == {}, f"processes of the job left after {timeout:.0f}s: {left}"


def assert_finished_alike(job: Job, size: int) -> None:
    """Every final rank holds the same parameters, after every step, none lost."""
    ends = [r for r in job.records() if r.get("done")]
    assert sorted(r["rank"] for r in ends) == list(range(size)), job.stdout
    assert {r["size"] for r in ends} == {size} and {r["step"] for r in ends} == {int(STEPS)}
    assert len({r["hash"] for r in ends}) == 1
    steps = [r["step"] for r in job.records() if "step" in r and "done" not in r]
    # committed every step: a step after the last commit is done again, none is skipped
    assert sorted(set(steps)) == list(range(1, int(STEPS) + 1))


def generations(job: Job) -> list[tuple[int, str]]:
    return [(e["size"], e["hosts"]) for e in job.events() if e["event"] == "generation"]


def test_a_host_whose_processes_are_killed_leaves_the_job_on_two_hosts(netns_cluster,
                                                                        tmp_path):
    job = Job(netns_cluster, tmp_path, "--min-np", "2", "--", STEPS, "--sleep", "0.1")
    try:
        job.wait_step(15)
        victims = job_processes(netns_cluster, job, "h3")
        assert victims, "no process of the job found on h3"
        for pid in victims:      # the bootstrap, its guard and the worker: a dead host
            os.kill(pid, signal.SIGKILL)
    finally:
        code = job.finish()
    assert code == 0, job.stderr
    assert_finished_alike(job, 2)
    assert generations(job) == [(3, "h1:1,h2:1,h3:1"), (2, "h1:1,h2:1")]
    assert "host h3 blacklisted" in job.stderr
    wait_no_process_left(netns_cluster, job, 30)


def test_a_host_whose_link_is_cut_leaves_the_job_and_fences_itself(netns_cluster,
                                                                    tmp_path):
    """h3's worker is busy outside any collective (it sleeps at step 15), so it cannot
    notice the cut itself: its bootstrap must fence it."""
    job = Job(netns_cluster, tmp_path, "--min-np", "2", "--", STEPS, "--sleep", "0.1",
              "--hang-on-host", "h3:15")
    cut = False
    try:
        job.wait_line("h3's worker to hang", lambda line: '{"hangs": ' in line)
        assert job_processes(netns_cluster, job, "h3")
        link_down(netns_cluster, "h3")
        cut = True
        code = job.finish()
        assert code == 0, job.stderr
        assert_finished_alike(job, 2)
        assert generations(job) == [(3, "h1:1,h2:1,h3:1"), (2, "h1:1,h2:1")]
        assert "host h3 blacklisted" in job.stderr
        # Nothing reaches h3 still: only its own fencing can have ended its processes.
        wait_no_process_left(netns_cluster, job, LIVENESS + FENCE_SLACK + 30)
    finally:
        if cut:
            link_up(netns_cluster, "h3")
        if job.proc.poll() is None:
            job.finish()


def test_a_host_added_to_the_discovery_output_joins_and_the_size_grows(netns_cluster,
                                                                        tmp_path):
    listed = tmp_path / "hosts.txt"
    listed.write_text("h1:1\nh2:1\n")
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {listed}\n")
    script.chmod(0o755)
    job = Job(netns_cluster, tmp_path, "--min-np", "2", "--", STEPS, "--sleep", "0.1",
              hosts=("--host-discovery-script", str(script)))
    try:
        job.wait_step(10)
        listed.write_text("h1:1\nh2:1\nh3:1\n")
    finally:
        code = job.finish()
    assert code == 0, job.stderr
    assert_finished_alike(job, 3)
    assert generations(job) == [(2, "h1:1,h2:1"), (3, "h1:1,h2:1,h3:1")]
    kinds = [e["event"] for e in job.events()]
    assert kinds.index("worker_joined") < kinds.index("hosts_updated")   # pre-warmed
    wait_no_process_left(netns_cluster, job, 30)


def test_a_flapping_host_is_blacklisted_each_time_it_fails(netns_cluster, tmp_path):
    """Every worker on h3 fails after 5 steps; the cooldown lets h3 back, it fails again."""
    job = Job(netns_cluster, tmp_path, "--min-np", "2", "--blacklist-cooldown-range", "1",
              "2", "--", "120", "--sleep", "0.1", "--fail-on-host", "h3:5")
    code = job.finish()
    assert code == 0, job.stderr
    log = job.events()
    out = [e for e in log if e["event"] in ("blacklist", "readmit") and e["host"] == "h3"]
    assert [e["event"] for e in out][:3] == ["blacklist", "readmit", "blacklist"], log
    assert all(e["cooldown"] is not None and 1 <= e["cooldown"] <= 2
               for e in out if e["event"] == "blacklist")
    ends = [r for r in job.records() if r.get("done")]
    assert len({r["hash"] for r in ends}) == 1 and {r["step"] for r in ends} == {120}
    wait_no_process_left(netns_cluster, job, 30)


def test_the_reset_limit_ends_a_job_whose_host_keeps_failing(netns_cluster, tmp_path):
    job = Job(netns_cluster, tmp_path, "--min-np", "2", "--blacklist-cooldown-range", "1",
              "2", "--reset-limit", "1", "--", "400", "--sleep", "0.1",
              "--fail-on-host", "h3:5")
    code = job.finish()
    assert code == 1, job.stderr
    assert "the job was reset 1 times already, the --reset-limit" in job.stderr
    resets = [e["resets"] for e in job.events() if e["event"] == "generation"]
    assert max(resets) == 1
    wait_no_process_left(netns_cluster, job, 30)
