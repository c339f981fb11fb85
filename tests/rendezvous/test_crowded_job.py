"""A job whose rendezvous is crowded by idle, unauthenticated connections while its
ranks call init() (70, as many as the bound and more, and 500): every rank still gets in."""

from __future__ import annotations

import sys

import pytest

from tests.helpers import ROOT, run_gcurun

pytestmark = pytest.mark.integration

RANK = str(ROOT / "tests" / "ranks" / "crowded_init.py")


@pytest.mark.parametrize("idle", [70, 500])
def test_idle_connections_to_the_rendezvous_do_not_keep_the_ranks_out(tmp_path, idle):
    done = run_gcurun("-np", "4", sys.executable, RANK, str(tmp_path), str(idle),
                      timeout=180)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [f"[{r}] rank {r} sum 10" for r in range(4)]
