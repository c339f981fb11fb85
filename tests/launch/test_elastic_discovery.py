"""Parsing the discovery script's output, and running it."""

from __future__ import annotations

import os
import stat

import pytest

from gcurun.errors import UsageError
from gcurun.hosts.api import HostSpec
from gcurun.launch.elastic.discovery import (
    DiscoveryError,
    check_fixed_hosts,
    parse_discovery_output,
    run_discovery,
)


def test_lines_in_host_spec_syntax_keep_their_order():
    text = "# hosts\nh2:4\n\nalice@h1:2  # a comment\n[fe80::1]:2\nnode[01-02]:8\nh2:3\n"
    found = parse_discovery_output(text, None)
    assert [(h.name, h.slots, h.user) for h in found] == [
        ("h2", 3, None), ("h1", 2, "alice"), ("fe80::1", 2, None), ("node01", 8, None),
        ("node02", 8, None)]


def test_bare_host_takes_slots_or_is_refused_with_the_fix():
    assert parse_discovery_output("h3\n", 4) == (HostSpec("h3", slots=4),)
    with pytest.raises(DiscoveryError) as info:
        parse_discovery_output("h1:2\nh3\n", None, "./hosts.sh")
    assert str(info.value) == ("./hosts.sh printed 'h3' without a slot count; print "
                               "'h3:SLOTS' or pass --slots N")
    assert info.value.exit_code == 2


def test_bad_line_quotes_it():
    with pytest.raises(DiscoveryError, match=r"printed 'h1:x': slots must be a whole"):
        parse_discovery_output("h1:x\n", None)


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "hosts.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return os.fspath(path)


def test_run_discovery_runs_the_script(tmp_path):
    assert run_discovery(_script(tmp_path, "echo a:1; echo b:2\n"), None, 10) == (
        HostSpec("a", 1), HostSpec("b", 2))


def test_run_discovery_failure_names_the_code_and_stderr(tmp_path):
    script = _script(tmp_path, "echo nope >&2; exit 3\n")
    with pytest.raises(DiscoveryError) as info:
        run_discovery(script, None, 10)
    assert str(info.value) == f"discovery script '{script}' exited with code 3: nope"
    assert info.value.exit_code == 1


def test_run_discovery_missing_script_is_bad_input(tmp_path):
    with pytest.raises(DiscoveryError) as info:
        run_discovery(os.fspath(tmp_path / "missing.sh"), None, 10)
    assert info.value.exit_code == 2 and "give an executable file" in str(info.value)


def test_fixed_hosts_need_two():
    with pytest.raises(UsageError) as info:
        check_fixed_hosts([HostSpec("h1", 4)], "h1:4")
    assert str(info.value) == ("--min-np with -H 'h1:4': elastic jobs need at least 2 "
                               "hosts (a host whose ranks fail is blacklisted); add hosts "
                               "or drop --min-np")
    check_fixed_hosts([HostSpec("h1"), HostSpec("h2")], "h1,h2")
