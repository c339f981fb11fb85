"""SIGTERM to gcurun half a second after an SSH job's ranks reported, over and over while
every CPU is busy: each time gcurun must exit 143 and leave nothing on any host.

A few repetitions run in the default suite; ``pytest -m stress`` runs 50.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.test_ssh_cluster import bootstraps, processes_with
from tests.helpers import ROOT, gcurun_cmd, rank_reports, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

RANK = str(Path(__file__).resolve().parent / "rank_report.py")
EXIT_DEADLINE = 60.0   # a run that has not exited by then is stuck: the failure sought


@pytest.fixture
def busy_cpus() -> Iterator[None]:
    """One busy process per CPU for the test's duration."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for b in burners:
            b.kill()
            b.wait(10)


def sigterm_after_report(cluster, tmp_path: Path) -> tuple[int | None, str, str]:
    """One run: (exit code or None when stuck, stderr, the job's token)."""
    token = uuid.uuid4().hex
    proc = subprocess.Popen(
        gcurun_cmd("-np", "4", "-H", "h1:2,h2:2", "--ssh-config", str(cluster.ssh_config),
                   "--grace-seconds", "3", "-x", f"TEST_TOKEN={token}",
                   "-x", f"GO_FILE={tmp_path / 'never'}", sys.executable, RANK),
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        wait_for("the 4 ranks to report", lambda: len(rank_reports("".join(out))) == 4, 120)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        try:
            err = proc.communicate(timeout=EXIT_DEADLINE)[1]
        except subprocess.TimeoutExpired:
            return None, "", token
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err, token


def repeat(cluster, tmp_path: Path, times: int) -> None:
    stuck, wrong = 0, []
    for i in range(times):
        code, err, token = sigterm_after_report(cluster, tmp_path)
        if code is None:
            stuck += 1
        elif code != 143 or "gcurun: interrupted by SIGTERM; stopped every rank" not in err:
            wrong.append((i, code, err))
        wait_for(f"run {i}: every rank on every host to be gone",
                 lambda token=token: not processes_with(token), 20)
        wait_for(f"run {i}: every bootstrap to exit", lambda: not bootstraps(cluster), 20)
    print(f"{times} runs: {stuck} stuck, {len(wrong)} wrong exits")
    assert (stuck, wrong) == (0, [])


def test_sigterm_after_the_ranks_reported_under_load(netns_cluster, tmp_path, busy_cpus):
    repeat(netns_cluster, tmp_path, 3)


@pytest.mark.stress
@pytest.mark.timeout(3600)
def test_sigterm_after_the_ranks_reported_under_load_50_times(netns_cluster, tmp_path,
                                                               busy_cpus):
    repeat(netns_cluster, tmp_path, 50)
