"""gcurun in a real Grid Engine parallel job (a one-host Grid Engine started for these
tests, tests/cluster/gridengine.py): the hosts and slots come from PE_HOSTFILE and NSLOTS
without a flag, the ranks run an allreduce, and qdel stops every rank. Long: starting the
daemons takes about ten seconds, a job a few more."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import gridengine
from tests.cluster.gridengine import GridEngine, _alive

ROOT = Path(__file__).resolve().parent.parent.parent
RANKS = ROOT / "tests" / "ranks"
JOB_SECONDS = 240

pytestmark = [pytest.mark.long, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def engine() -> Iterator[GridEngine]:
    why = gridengine.available()
    if why:
        pytest.skip(why)
    running = gridengine.start()
    try:
        yield running
    finally:
        running.stop()


def _script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n"
                      f"cd {ROOT}\nexport PYTHONPATH={ROOT}\n{body}\n")
    return script


def _wait_for(what: str, ready, seconds: float = JOB_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_pe_job_runs_its_ranks_on_the_granted_slots(engine, tmp_path):
    output = tmp_path / "out.txt"
    gcurun = f"{sys.executable} -m gcurun"
    script = _script(tmp_path, f"{gcurun} --dry-run --color never true | grep -E '^(np|hosts) '\n"
                               f"{gcurun} {sys.executable} {RANKS / 'collective_check.py'}\n"
                               "echo exit=$?")
    job = engine.qsub(script, 3, output)
    assert engine.wait_gone(job, JOB_SECONDS), f"job {job} did not finish"
    text = output.read_text()
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()
            if line.startswith(("np ", "hosts "))}
    assert rows["np"] == ["3", "gridengine:PE_HOSTFILE"], text
    assert rows["hosts"] == [f"{engine.host}:3", "gridengine:PE_HOSTFILE"], text
    results = [json.loads(line.partition("]")[2] or line) for line in text.splitlines()
               if '"checksum"' in line]
    assert sorted(r["rank"] for r in results) == [0, 1, 2], text
    # sum over ranks r of (r+1) * sum(0..1000)
    assert {r["checksum"] for r in results} == {6 * 500500}, text
    assert "exit=0" in text, text


def test_qdel_stops_every_rank(engine, tmp_path):
    output = tmp_path / "out.txt"
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    script = _script(tmp_path, f"{sys.executable} -m gcurun {sys.executable} "
                               f"{RANKS / 'worker.py'} {ranks} --grandchild --linger 600")
    job = engine.qsub(script, 2, output)
    files = [ranks / "rank-0.json", ranks / "rank-1.json"]
    _wait_for("both ranks to start", lambda: all(f.exists() for f in files))
    records = [json.loads(f.read_text()) for f in files]
    pids = [r["pid"] for r in records] + [r["grandchild"] for r in records]
    assert all(_alive(pid) for pid in pids)
    assert records[0]["env"]["GCURUN_SIZE"] == "2"
    engine.run("qdel", job)
    _wait_for("every rank and its child to end after qdel",
              lambda: not any(_alive(pid) for pid in pids), seconds=120)
    assert engine.wait_gone(job, 60)

