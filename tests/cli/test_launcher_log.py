"""--verbose, --log-level and GCURUN_LOG_LEVEL: the launcher says what it decides and does."""

from __future__ import annotations

import re

import pytest

from tests.helpers import ROOT, run_gcurun

FAIL_RANK_1 = ("sh", "-c", "exit $GCURUN_RANK")


def _log_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if re.match(r"(\S+ \S+ )?gcurun: [a-z]+: ",
                                                              line)]


def _shape(line: str) -> str:
    """A log line with its numbers (ports, pids, timestamps) written as N."""
    return re.sub(r"\d+", "N", line)


def test_verbose_says_hosts_launcher_ports_what_starts_and_how_it_stops():
    res = run_gcurun("-np", "2", "--verbose", *FAIL_RANK_1)
    assert res.returncode == 1
    lines = [_shape(line) for line in _log_lines(res.stderr)]
    assert lines[:5] == [
        "gcurun: info: hosts (from default): localhost:N",
        "gcurun: info: launcher local (every rank is on this host); N rank(s); accelerator "
        "gcu (TOPS_VISIBLE_DEVICES)",
        f"gcurun: info: MASTER_ADDR N.N.N.N, MASTER_PORT N; working directory "
        f"{_shape(str(ROOT))}",
        "gcurun: info: rendezvous of the tcp runtime listening on port N (N.N.N.N)",
        "gcurun: info: starting the ranks of host localhost (LocalRankGroup)",
    ]
    raw = _log_lines(res.stderr)
    failed = raw.index("gcurun: info: rank 1 exited: code 1")
    assert raw[failed + 1] == "gcurun: info: stopping every rank (rank 1 failed): SIGTERM, " \
                              "SIGKILL after 10s"
    assert not any(line.startswith("gcurun: debug:") for line in lines)


@pytest.mark.parametrize("how", ["--log-level", "GCURUN_LOG_LEVEL"])
def test_debug_level_adds_each_rank_and_the_close(how):
    args = ("--log-level", "debug") if how == "--log-level" else ()
    env = {"GCURUN_LOG_LEVEL": "debug"} if how == "GCURUN_LOG_LEVEL" else {}
    res = run_gcurun("-np", "2", *args, *FAIL_RANK_1, env=env)
    assert res.returncode == 1
    lines = _log_lines(res.stderr)
    assert "gcurun: debug: rank 1: host localhost, local rank 1 of 2, device 1, command sh " \
           "-c exit $GCURUN_RANK" in lines
    assert "gcurun: debug: closing every rank group" in lines


def test_no_log_lines_by_default():
    res = run_gcurun("-np", "2", "true", env={"GCURUN_LOG_LEVEL": ""})
    assert res.returncode == 0
    assert res.stderr == ""


def test_log_with_timestamp_prefixes_the_time():
    res = run_gcurun("-np", "1", "--verbose", "--log-with-timestamp", "true")
    assert res.returncode == 0
    first = res.stderr.splitlines()[0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} gcurun: info: hosts "
                        r"\(from default\): localhost:1", first)


def test_prefix_output_with_timestamp_stamps_each_rank_line():
    res = run_gcurun("-np", "1", "-prefix-timestamp", "echo", "hi")
    assert res.returncode == 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \[0\] hi\n", res.stdout)


def test_a_bad_log_level_variable_is_bad_input():
    res = run_gcurun("-np", "1", "true", env={"GCURUN_LOG_LEVEL": "loud"})
    assert res.returncode == 2
    assert res.stderr == ("gcurun: error: GCURUN_LOG_LEVEL=loud: not a log level; write one "
                          "of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL\n")


def test_the_ranks_log_at_the_level_given():
    script = "import gcurun.runtime as hvd; hvd.init(); hvd.shutdown()"
    res = run_gcurun("-np", "2", "--log-level", "info", "python3", "-c", script)
    assert res.returncode == 0, res.stderr
    joined = sorted(line for line in res.stderr.splitlines() if "joined" in line)
    assert joined == [
        "[0] gcurun: info: rank 0 of 2 joined (local rank 0 of 2), backend tcp",
        "[1] gcurun: info: rank 1 of 2 joined (local rank 1 of 2), backend tcp",
    ]
