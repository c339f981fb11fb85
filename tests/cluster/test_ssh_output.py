"""Rank output of SSH jobs under hostile conditions (the ranks on other hosts, their output
relayed over SSH): a full log disk on the launcher's host, a console nobody reads."""

from __future__ import annotations

import signal
import sys

import pytest

from tests.cli.test_run_output import CHATTY, full_tmpfs, sigterm_with_an_unread_console
from tests.helpers import run_gcurun, survivors

pytestmark = [pytest.mark.cluster, pytest.mark.integration]


def test_a_full_log_disk_does_not_stop_an_ssh_job(netns_cluster, tmp_path):
    with full_tmpfs(tmp_path / "small") as small:
        res = run_gcurun("-np", "2", "-H", "h1:1,h2:1", "--ssh-config",
                         str(netns_cluster.ssh_config), "--output-dir", str(small),
                         sys.executable, CHATTY, str(tmp_path), "--bytes", str(200 * 1024),
                         timeout=120)
    assert res.returncode == 0, res.stderr
    for rank, letter in ((0, "a"), (1, "b")):
        assert res.stdout.count(f"[{rank}] {letter * 1023}\n") == 200
    assert sum("cannot write" in line for line in res.stderr.splitlines()) == 1, res.stderr
    assert "No space left on device" in res.stderr
    assert res.stderr.splitlines()[-1].startswith("gcurun: warning: incomplete logs: ")


def test_a_console_nobody_reads_does_not_hold_an_ssh_job(netns_cluster, tmp_path):
    """Ranks on two hosts write 100 MB each into a gcurun whose stdout is a pipe nobody
    reads: gcurun's memory stays bounded, and SIGTERM stops it and every rank."""
    code, stderr, ranks = sigterm_with_an_unread_console(
        tmp_path, ["-np", "2", "-H", "h1:1,h2:1", "--ssh-config", str(netns_cluster.ssh_config)],
        100 * 1024 * 1024)
    assert code == 128 + signal.SIGTERM, stderr
    assert survivors(ranks) == []
