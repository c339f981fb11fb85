"""The JSON plan of a 2x8 job, checked against a reviewed snapshot.

To accept a deliberate change: GCURUN_UPDATE_SNAPSHOTS=1 pytest tests/cli, then review
the diff of tests/snapshots/ before committing it.
"""

from __future__ import annotations

import json
import os
import subprocess

from tests.helpers import ROOT, gcurun_cmd

SNAPSHOT = ROOT / "tests" / "snapshots" / "plan-2x8.json"
ARGS = ("--dry-run", "--json", "-H", "gcu-node1:8,gcu-node2:8", "--master-port", "29500",
        "--workdir", "/srv/train", "-x", "NCCL_DEBUG=INFO", "python", "train.py", "--epochs", "3")


def test_plan_of_two_hosts_with_eight_gcus_matches_snapshot():
    # A fixed environment: the plan lists the names it forwards to other hosts.
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8",
           "HOME": "/home/user", "HOSTNAME": "launcher", "SSH_CONNECTION": "1 2 3 4"}
    res = subprocess.run(gcurun_cmd(*ARGS), capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    if os.environ.get("GCURUN_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(json.dumps(plan, indent=2) + "\n")
    assert plan == json.loads(SNAPSHOT.read_text())
