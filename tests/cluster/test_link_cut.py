"""A static SSH job whose host's link is cut mid-job (nothing, no FIN nor RST, tells
either end): the launcher gives the host up after ``--liveness-timeout`` and exits with
255 naming it, and on the cut-off host its bootstrap, hearing no ping, stops every rank,
the one inside a collective and the one outside any, whether the link stays down or comes
back after the launcher is gone."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.cluster.netns import NetnsCluster, link_down, link_up, processes_in
from tests.helpers import ROOT, gcurun_cmd

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

RANK = str(Path(__file__).resolve().parent / "link_cut_rank.py")
BOOTSTRAP = "gcurun.launch.remote.bootstrap"
LIVENESS = 3.0      # --liveness-timeout
FENCE_SLACK = 5.0   # a bootstrap fences itself this long after the liveness timeout
GRACE = 2.0         # --grace-seconds: SIGTERM to SIGKILL
MARGIN = 30.0       # this machine is small and shared
START_SECONDS = 180.0


def start_job(cluster: NetnsCluster, token: str) -> tuple[subprocess.Popen[str],
                                                         queue.Queue[str | None]]:
    """gcurun with rank 0 on h1 and ranks 1-2 on h3; its stdout lines go on the queue."""
    proc = subprocess.Popen(
        gcurun_cmd("-H", "h1:1,h3:2", "--ssh-config", str(cluster.ssh_config),
                   "--liveness-timeout", f"{LIVENESS:g}", "--grace-seconds", f"{GRACE:g}",
                   sys.executable, RANK, token),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def wait_for_lines(lines: queue.Queue[str | None], wanted: set[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while wanted and (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        assert line is not None, f"the job ended early: {seen}"
        seen.append(line)
        wanted = {w for w in wanted if w not in line}
    assert not wanted, f"timed out waiting for {wanted}; saw {seen}"


def wait_no_rank_left(cluster: NetnsCluster, host: str, token: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (left := processes_in(cluster.host(host), token, BOOTSTRAP)) and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], f"processes of the job left on {host} after {timeout:.0f}s: {left}"


@pytest.mark.parametrize("link_returns", ["after the fencing", "once the launcher is gone"])
def test_a_cut_link_ends_the_job_naming_the_host_and_leaves_no_rank_there(
        netns_cluster, link_returns):
    token = uuid.uuid4().hex
    proc, lines = start_job(netns_cluster, token)
    cut = False
    try:
        wait_for_lines(lines, {"rank 0 in a collective", "rank 1 in a collective",
                               "rank 2 sleeping"}, START_SECONDS)
        assert processes_in(netns_cluster.host("h3"), token)
        link_down(netns_cluster, "h3")
        cut = True
        # Deadline, not timing: the launcher must notice and stop the job by itself.
        code = proc.wait(LIVENESS + GRACE + MARGIN + 30)
        stderr = proc.stderr.read() if proc.stderr else ""
        assert code == 255, stderr
        assert "rank 1 on h3" in stderr and "(root cause)" in stderr, stderr
        assert f"no word from h3 for {LIVENESS:g} s" in stderr, stderr
        if link_returns == "once the launcher is gone":
            link_up(netns_cluster, "h3")
            cut = False
        wait_no_rank_left(netns_cluster, "h3", token, LIVENESS + FENCE_SLACK + GRACE + MARGIN)
        if cut:
            link_up(netns_cluster, "h3")
            cut = False
        assert processes_in(netns_cluster.host("h3"), token, BOOTSTRAP) == []
        assert processes_in(netns_cluster.host("h1"), token, BOOTSTRAP) == []
    finally:
        if cut:
            link_up(netns_cluster, "h3")
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
