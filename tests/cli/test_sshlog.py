"""The CLI's rendering of the SSH executor's reports: warnings, and live preflight progress
only on a terminal and only for many hosts."""

from __future__ import annotations

import io
import logging

from gcurun.cli.sshlog import PROGRESS_MIN_HOSTS, ssh_reports
from gcurun.launch.ssh.preflight import PreflightProgress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def report(stream, total, failed=()):
    log = logging.getLogger("gcurun.ssh")
    with ssh_reports(stream):
        for done in range(1, total + 1):
            p = PreflightProgress(f"n{done}", done not in failed, done, total)
            log.info("progress", extra={"preflight": p})
        log.warning("n1 (10.0.0.1): host key not checked")


def test_many_hosts_on_a_terminal_show_one_updating_progress_line():
    out = Terminal()
    report(out, PROGRESS_MIN_HOSTS, failed={2})
    text = out.getvalue()
    assert text.startswith("\rgcurun: ssh preflight: 1/8 hosts checked, 0 failed\r")
    assert text.endswith("\rgcurun: ssh preflight: 8/8 hosts checked, 1 failed\n"
                         "gcurun: warning: n1 (10.0.0.1): host key not checked\n")


def test_few_hosts_or_no_terminal_show_warnings_only():
    for out, total in ((Terminal(), PROGRESS_MIN_HOSTS - 1), (io.StringIO(), 20)):
        report(out, total)
        assert out.getvalue() == "gcurun: warning: n1 (10.0.0.1): host key not checked\n"
