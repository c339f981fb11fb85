"""Jobs that use the runtime through gcurun's own launcher: the tcp backend, its
rendezvous served by the launcher, and its secret kept off every command line."""

from __future__ import annotations

import json
import sys

import pytest

from tests.helpers import RANKS, rank_reports, run_gcurun

pytestmark = pytest.mark.integration

CHECK = str(RANKS / "collective_check.py")


def expected_checksum(size: int) -> int:
    return sum(range(1001)) * size * (size + 1) // 2


@pytest.mark.parametrize("np", [2, 3])
def test_local_launch_runs_the_tcp_backend(np):
    res = run_gcurun("-np", str(np), sys.executable, CHECK)
    assert res.returncode == 0, res.stderr
    got = rank_reports(res.stdout)
    assert len(res.stdout.splitlines()) == np and sorted(got) == list(range(np))
    for rank, rep in got.items():
        assert (rep["backend"], rep["rank"], rep["size"], rep["local_rank"]) == \
               ("tcp", rank, np, rank)
        assert rep["checksum"] == expected_checksum(np)


def test_secret_and_rendezvous_reach_ranks_off_the_command_line(tmp_path):
    script = tmp_path / "show.py"
    script.write_text(
        "import os, psutil\n"
        "secret = os.environ['GCURUN_SECRET']\n"
        "assert len(secret) >= 32, secret\n"
        "host, port = os.environ['GCURUN_RENDEZVOUS'].rsplit(':', 1)\n"
        "assert host == '127.0.0.1' and int(port) > 0\n"
        "seen = [p.pid for p in psutil.process_iter(['cmdline'])\n"
        "        if secret in ' '.join(p.info['cmdline'] or ())]\n"
        "print('secret on command lines:', seen)\n")
    res = run_gcurun("-np", "2", sys.executable, str(script))
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == ["[0] secret on command lines: []",
                                              "[1] secret on command lines: []"]


def test_dry_run_never_shows_the_secret():
    res = run_gcurun("--dry-run", "--json", "-np", "2", "python", "x.py")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    env = {**plan["env"], **plan["ranks"][0]["env"]}
    assert "GCURUN_SECRET" not in env and "GCURUN_RENDEZVOUS" not in env
