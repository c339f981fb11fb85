"""Chaos: jobs of every launcher with a rank, a host's bootstrap or gcurun itself killed
at a random moment (see chaos.py for the rules). Five rounds with a fixed seed run in the
default suite; ``pytest -m chaos`` runs 30 (seed from GCURUN_CHAOS_SEED, else random; the
seed is printed so a failing run can be replayed)."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from tests.cluster.chaos import run_rounds, tally

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.mpi,
              pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")]

CI_SEED = 56   # its five rounds cover every launcher, victim and signal


def check(netns_cluster, tmp_path, seed: int, count: int) -> None:
    print(f"chaos seed {seed}")
    verdicts = run_rounds(netns_cluster, tmp_path, seed, count)
    print(tally(verdicts))
    bad = [(v.round.describe(), v.exit_code, v.expected_code, v.expected_line,
            v.stderr[-800:], v.survivors) for v in verdicts if not v.ok]
    assert bad == [], tally(verdicts)


def test_five_chaos_rounds(netns_cluster, tmp_path):
    check(netns_cluster, tmp_path, CI_SEED, 5)


@pytest.mark.chaos
@pytest.mark.timeout(3600)
def test_thirty_chaos_rounds(netns_cluster, tmp_path):
    seed = int(os.environ.get("GCURUN_CHAOS_SEED") or random.randrange(1 << 30))
    check(netns_cluster, tmp_path, seed, 30)
