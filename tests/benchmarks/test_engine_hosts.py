"""benchmarks/engine.py --hosts without hosts: its options, a run's line and the
summary over runs (the goal judged in every run)."""

from __future__ import annotations

import argparse

import pytest

from benchmarks.engine_hosts import parse_hosts, run_line, summary


def result(fused: float, single: float) -> dict:
    return {"times": {"fused": [fused, fused * 1.1, fused * 0.9], "single": [single] * 3,
                      "unfused": [3 * fused] * 3, "views": [single] * 3},
            "load": [1.5, 2.25], "batches_per_step": {"fused": 2.0, "single": 0.0,
                                                      "unfused": 161.0, "views": 2.0}}


def test_host_counts():
    assert parse_hosts("2,4") == [2, 4]
    with pytest.raises(argparse.ArgumentTypeError, match="--hosts '1,4': write host counts "
                                                         "of at least 2"):
        parse_hosts("1,4")
    with pytest.raises(argparse.ArgumentTypeError, match="--hosts 'two'"):
        parse_hosts("two")


def test_a_run_line_says_whether_fused_met_the_goal():
    line = run_line(4, 4, result(0.55, 0.5))
    assert line.split()[:8] == ["4", "4", "550.0", "500.0", "1650.0", "500.0", "1.100",
                                "3.00"]
    assert " met " in line and "1.50-2.25" in line
    assert "NOT met" in run_line(4, 4, result(0.6, 0.5))


def test_the_summary_counts_the_runs_that_met_the_goal():
    (heading, line) = summary({2: [result(0.5, 0.5), result(0.6, 0.5), result(0.52, 0.5)]},
                              per_host=1)
    assert heading.startswith("# over the runs")
    assert "2 hosts x 1: fused 520.0 (500.0-600.0)" in line
    assert "fused/single 1.040 (1.000-1.200), goal met in 2 of 3 runs" in line
