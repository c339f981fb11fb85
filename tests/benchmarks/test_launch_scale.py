"""benchmarks/launch_scale.py end to end, in small: both tables come out, and the
interrupted start ends with gcurun's exit code for SIGINT."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytestmark = [pytest.mark.benchmark, pytest.mark.integration]


def test_launch_scale_prints_its_tables_in_small():
    done = subprocess.run(
        [sys.executable, "benchmarks/launch_scale.py", "--repeat", "1", "--hosts", "20",
         "--slots", "2", "--big", "50", "--start", "400"],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split("|")[1].strip() for line in lines[2:6]] == [
        "20 hosts x 2, table", "20 hosts x 2, JSON", "one host, table", "one host, JSON"]
    last = lines[-1].split("|")
    assert last[1].strip() == "400 local ranks" and last[-2].strip() == "130"
    assert 10 <= int(last[4]) <= 400
