"""Paddle's and JAX's own distributed modes under ``gcurun -np 2``: the variables the
plan sets (docs/frameworks.md) are all they need. Each runs a real 2-rank all-reduce;
the tests skip where the framework is not installed (tests/setup-and-run.sh installs
them)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.frameworks.test_paddle_jax_contract import free_ports
from tests.helpers import rank_reports, run_gcurun, skip_without

pytestmark = [pytest.mark.integration]

RANK = str(Path(__file__).resolve().parent / "contract_rank.py")


@pytest.mark.paddle
def test_paddle_all_reduce_under_gcurun():
    skip_without("paddle", "pip install paddlepaddle")
    (port,) = free_ports(1)
    # No accelerator here: Paddle's CPU build takes the gloo backend the plan names.
    res = run_gcurun("-np", "2", "--accelerator", "none", "--master-port", str(port),
                     sys.executable, RANK, "paddle", timeout=180)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    got = rank_reports(res.stdout)
    assert [(got[r]["rank"], got[r]["size"], got[r]["sum"]) for r in (0, 1)] == \
        [(0, 2, 3.0), (1, 2, 3.0)]
    # Rank 0 serves Paddle's store on PADDLE_MASTER, the job's port; rank 1 serves none.
    assert got[0]["listening"] == [port] and got[1]["listening"] == []


@pytest.mark.jax
def test_jax_distributed_initialize_under_gcurun():
    skip_without("jax", "pip install jax")
    # JAX reads its coordinator from JAX_COORDINATOR_ADDRESS; the count and id come from
    # the script (here from WORLD_SIZE and RANK), as JAX detects no gcurun.
    res = run_gcurun("-np", "2", "-x", "JAX_PLATFORMS=cpu", "-x", "CONTRACT_IDS_FROM=torch",
                     sys.executable, RANK, "jax", timeout=180)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    got = rank_reports(res.stdout)
    assert [(got[r]["rank"], got[r]["size"], got[r]["sum"]) for r in (0, 1)] == \
        [(0, 2, 3.0), (1, 2, 3.0)]
