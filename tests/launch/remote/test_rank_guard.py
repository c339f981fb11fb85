"""The rank guard of MPI-started ranks: one where the daemon gives each rank its own
process group, none under Slurm's step daemon, which puts a node's tasks in one group."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A parent named NAME starts a child that leads its own group and asks for a guard.
PARENT = r"""
import ctypes, os, subprocess, sys
ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)
child = ("import os; os.setpgid(0, 0); "
         "from gcurun.launch.remote.rank_guard import start_rank_guard; "
         "print(start_rank_guard() is not None)")
sys.exit(subprocess.run([sys.executable, "-c", child], timeout=30).returncode)
"""


@pytest.mark.parametrize(("parent", "guarded"), [("prted", "True"), ("slurmstepd", "False")])
def test_a_guard_only_where_each_rank_leads_its_own_group(parent, guarded):
    done = subprocess.run([sys.executable, "-c", PARENT, parent], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == guarded
