"""Autotune on real rank processes: every rank takes rank 0's decisions at the same
cycle, the results are those of an untuned job, held knobs stay put, the log has
Horovod's columns (no timing is asserted anywhere)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.runtime.jobs import run_tcp

pytestmark = pytest.mark.integration


def _histories(stdout: str, size: int) -> list[list]:
    found = {}
    for line in stdout.splitlines():
        if line.startswith("KNOBS "):
            _, rank, text = line.split(" ", 2)
            found[int(rank)] = json.loads(text)
    assert sorted(found) == list(range(size)), stdout
    return [found[r] for r in range(size)]


def _autotune_env(tmp_path: Path, samples: int, **extra: str) -> dict[str, str]:
    return {"GCURUN_AUTOTUNE": "1", "GCURUN_AUTOTUNE_SAMPLER": "tpe",
            "GCURUN_AUTOTUNE_SEED": "5", "GCURUN_AUTOTUNE_WARMUP_SAMPLES": "1",
            "GCURUN_AUTOTUNE_STEPS_PER_SAMPLE": "1",
            "GCURUN_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": str(samples),
            "GCURUN_AUTOTUNE_LOG_FILE": str(tmp_path / "log.csv"), **extra}


@pytest.mark.parametrize("hosts, samples, steps", [
    pytest.param(["a", "a"], 4, 30, id="one-host-of-2"),
    # Hosts a, a, b, b: hierarchical allreduce is searched too.
    pytest.param(["a", "a", "b", "b"], 5, 50, id="two-hosts-of-2", marks=pytest.mark.long),
])
def test_every_rank_takes_every_decision_at_the_same_cycle(tmp_path, hosts, samples, steps):
    # The rank script checks every result exactly; the cycle time is held.
    size = len(hosts)
    env = _autotune_env(tmp_path, samples, GCURUN_CYCLE_TIME_MS="2")
    job = run_tcp(size, "autotuned.py", str(steps), env=env, hosts=hosts, timeout=240)
    assert job.returncodes == [0] * size, job.stderr
    histories = _histories(job.stdout, size)
    assert all(h == histories[0] for h in histories[1:])    # same cycles, same knobs
    assert len(histories[0]) >= 3
    cycles = [cycle for cycle, _, _ in histories[0]]
    assert cycles == sorted(set(cycles))
    assert [number for _, number, _ in histories[0]] == list(range(1, len(cycles) + 1))
    assert {knobs["cycle_time_ms"] for _, _, knobs in histories[0]} == {2.0}
    with open(tmp_path / "log.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["hierarchical_allreduce", "hierarchical_allgather", "torus_allreduce",
                       "cache_enabled", "cycle_time_ms", "tensor_fusion_threshold", "score",
                       "chunk_bytes", "stream_bytes"]
    assert len(rows) == 1 + samples + 1 and {row[4] for row in rows[1:]} == {"2"}
    assert "gcurun: autotune: chose: " in job.stderr
    assert "gcurun: autotune: to start there next time: gcurun " in job.stderr


@pytest.mark.long
def test_an_untuned_job_takes_no_decision(tmp_path):
    job = run_tcp(2, "autotuned.py", "6", timeout=120)
    assert job.returncodes == [0, 0], job.stderr
    assert _histories(job.stdout, 2) == [[], []]
    assert "autotune" not in job.stderr
