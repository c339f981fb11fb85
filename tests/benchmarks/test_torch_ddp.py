"""benchmarks/torch_ddp.py in small: 2 ranks it starts itself, one round of one step of
each variant, with ``--phases``. Times are reported, never asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


def test_one_round_gives_every_variant_a_row_and_gcuruns_engine_its_phases():
    done = subprocess.run(
        [sys.executable, "benchmarks/torch_ddp.py", "--model", "mlp", "--rounds", "1",
         "--steps", "1", "--warmup", "1", "--phases"],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in done.stdout.splitlines()
             if line.startswith("| ")]
    times = {row[0]: row for row in cells if len(row) == 5 and row[0] not in ("variant", "---")}
    assert sorted(times) == ["ddp", "gcurun", "no communication"]
    assert all(float(row[1]) > 0 for row in times.values())
    phases = {row[1]: row for row in cells if len(row) == 12 and row[0] == "mlp"}
    assert sorted(phases) == ["ddp", "gcurun", "no communication"]
    # gcurun's engine ran ring passes and cycles; DDP and the floor have no engine rows.
    gcurun = phases["gcurun"]
    assert float(gcurun[5]) > 0 and float(gcurun[10]) >= 1 and float(gcurun[11]) > 0
    assert phases["ddp"][5] == "-" and phases["no communication"][10] == "-"
    assert float(phases["ddp"][3]) > 0          # every variant's CPU per step
