"""Chaos: jobs of every launcher with a rank, a host's bootstrap or gcurun itself killed
at a random moment, some under a hostile condition (a full log disk, a blocked console, a
crowded rendezvous, a cut link; see chaos.py for the rules). The default suite runs five
plain rounds with a fixed seed and one round of each hostile condition; ``pytest -m chaos``
runs 30, half of them hostile (seed from GCURUN_CHAOS_SEED, else random; the seed is
printed so a failing run can be replayed)."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from tests.cluster.chaos import (
    HOSTILE_SHARE,
    Round,
    hostile_rounds,
    plan_rounds,
    run_rounds,
    tally,
)

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.mpi,
              pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")]

CI_SEED = 56   # its five rounds cover every launcher, victim and signal


def check(netns_cluster, tmp_path, rounds: list[Round]) -> None:
    verdicts = run_rounds(netns_cluster, tmp_path, rounds)
    print(tally(verdicts))
    bad = [(v.round.describe(), v.exit_code, v.expected_code, v.expected_line,
            v.stderr[-800:], v.survivors, v.problems) for v in verdicts if not v.ok]
    assert bad == [], tally(verdicts)


def test_five_chaos_rounds(netns_cluster, tmp_path):
    check(netns_cluster, tmp_path, plan_rounds(CI_SEED, 5))


def test_a_round_of_each_hostile_condition(netns_cluster, tmp_path):
    rounds = hostile_rounds(CI_SEED)
    assert {r.condition for r in rounds} == {"full-disk", "blocked-console",
                                             "crowded-rendezvous", "cut-link"}
    check(netns_cluster, tmp_path, rounds)


@pytest.mark.chaos
@pytest.mark.timeout(3600)
def test_thirty_chaos_rounds(netns_cluster, tmp_path):
    seed = int(os.environ.get("GCURUN_CHAOS_SEED") or random.randrange(1 << 30))
    print(f"chaos seed {seed}")
    check(netns_cluster, tmp_path, plan_rounds(seed, 30, HOSTILE_SHARE))
