"""benchmarks/cluster_allreduce.py end to end, in small: 2 hosts x 1 rank on shaped
links, one size, every variant; the table's shape and every variant's checked results."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.cluster.netns import unavailable_reason
from tests.helpers import ROOT

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.mpi,
              pytest.mark.torch, pytest.mark.benchmark]

VARIANTS = ["gcurun-tcp", "gcurun-mpi", "mpirun", "gloo"]
ROUNDS = 2


@pytest.fixture(scope="module")
def needs():
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    for tool, package in (("tc", "iproute2"), ("mpirun", "openmpi")):
        if shutil.which(tool) is None:
            pytest.skip(f"'{tool}' not found; install {package}")
    pytest.importorskip("torch", reason="the gloo variant needs torch")


def test_two_hosts_one_size_every_variant_checked(needs, tmp_path):
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "cluster_allreduce.py"), "--rate", "2gbit",
         "--layouts", "2x1", "--min-bytes", "64K", "--max-bytes", "64K", "--rounds",
         str(ROUNDS), "--seconds", "0.05", "--json", str(out)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=280)
    assert done.returncode == 0, done.stderr
    # Where it is, as it goes.
    assert "2x1: 64 KiB (1/1), round 2/2:" in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("# allreduce, 2 hosts x 1 rank(s) = 2 ranks, every host's "
                               "link shaped to 2 Gbit/s")
    assert "link-bound: 2 ranks on" in lines[0] or "CPU-bound: 2 ranks on" in lines[0]
    header = next(line for line in lines if line.startswith("#") and "variant" in line)
    assert header.split()[1:] == ["size", "variant", "calls", "time(us)", "algbw", "busbw",
                                  "range", "link", "vs", "mpirun", "vs", "gloo"]
    rows = [line.split() for line in lines if line.strip() and not line.startswith("#")]
    # One row per variant; the size only on the first; ratios to the peers on gcurun's.
    assert rows[0][0] == "65536"
    assert [rows[0][1]] + [row[0] for row in rows[1:]] == VARIANTS
    assert [len(row) for row in rows] == [10, 9, 7, 7]
    for row in [rows[0][1:], *rows[1:]]:
        calls, time_us, algbw, busbw, spread, link, *ratios = row[1:]
        low, high = (float(x) for x in spread.split("-"))
        assert int(calls) >= 1 and float(time_us) > 0 and 0 < low <= float(busbw) <= high
        assert float(algbw) == float(busbw) and float(link) > 0   # 2 ranks: busbw = algbw
        assert all(float(r) > 0 for r in ratios)
    assert f"results checked right on every rank: {ROUNDS * 4} turns of 4 variants, " \
        "none wrong" in done.stdout

    results = json.loads(out.read_text())
    (layout,) = results["layouts"]
    assert (layout["hosts"], layout["ranks_per_host"], layout["link_rate_bits"]) == \
        (2, 1, 2_000_000_000)
    assert sorted(row["variant"] for row in layout["rows"]) == sorted(VARIANTS)
    for row in layout["rows"]:
        assert row["nbytes"] == 65536 and row["checked_turns"] == ROUNDS
        assert len(row["seconds"]) == ROUNDS and all(s > 0 for s in row["seconds"])
