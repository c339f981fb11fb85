"""benchmarks/elastic_recovery.py without hosts: reading a round's records and the
driver's events, the summary and the table, the options."""

from __future__ import annotations

import argparse

import pytest

from benchmarks.elastic_recovery import (
    BenchmarkError,
    Recovery,
    analyse,
    format_table,
    parse_args,
    parse_cases,
    summarize,
)

DEATH = 1000.0


def records(last_before: int, resumed_from: int) -> list[dict]:
    steps = [{"ev": "step", "step": s, "t": DEATH - 1 + s * 0.01, "size": 3}
             for s in range(1, last_before + 1)]
    return steps + [
        {"ev": "reset", "t": DEATH + 2.5, "size": 2},
        {"ev": "sync", "t0": DEATH + 2.6, "t1": DEATH + 2.9, "size": 2},
        {"ev": "step", "step": resumed_from, "t": DEATH + 3.0, "size": 2},
        {"ev": "step", "step": resumed_from + 1, "t": DEATH + 3.1, "size": 2},
    ]


EVENTS = [{"event": "generation", "wall": DEATH - 5}, {"event": "hosts_updated",
                                                        "wall": DEATH + 0.5},
          {"event": "worker_exited", "wall": DEATH + 2.0},
          {"event": "reforming", "wall": DEATH + 2.1}]


def test_a_round_reads_as_seconds_from_the_death_and_steps_redone():
    got = analyse("cut", records(22, 21), EVENTS, DEATH)
    assert got == Recovery("cut", detect=pytest.approx(2.0), formed=pytest.approx(2.5),
                           broadcast=pytest.approx(0.3), resumed=pytest.approx(3.0),
                           redone=2)
    assert analyse("cut", records(20, 21), EVENTS, DEATH).redone == 0


def test_a_job_that_never_reformed_or_never_stepped_again_fails_the_round():
    with pytest.raises(BenchmarkError, match="never re-formed"):
        analyse("killed", records(20, 21)[:20], EVENTS, DEATH)
    with pytest.raises(BenchmarkError, match="never stepped again"):
        analyse("killed", records(20, 21)[:21], EVENTS, DEATH)


def test_the_summary_is_the_median_and_range_per_case():
    rows = [Recovery("killed", 0.1, 0.2, 0.05, 0.3, 1), Recovery("killed", 0.3, 0.4, 0.07,
                                                                  0.9, 0),
            Recovery("killed", 0.2, 0.3, 0.06, 0.5, 1), Recovery("cut", 3, 3.1, 0.05, 3.3, 0)]
    table = summarize(rows)
    assert table["killed"]["resumed"] == (0.5, 0.3, 0.9)
    assert table["killed"]["redone"] == (1, 0, 1)
    args = argparse.Namespace(at_step=20, state_mb=16.0, liveness=3.0, commit_every=1)
    text = format_table(rows, args)
    assert "| killed | 0.20 (0.10-0.30) | 0.30 (0.20-0.40) | 0.06 (0.05-0.07) | " \
           "0.50 (0.30-0.90) | 1 (0-1) |" in text
    assert "| cut | 3.00 (3.00-3.00) |" in text


def test_options_are_checked():
    assert parse_cases("cut") == ["cut"]
    with pytest.raises(argparse.ArgumentTypeError, match="'crash': cases are killed and cut"):
        parse_cases("crash")
    with pytest.raises(SystemExit):
        parse_args(["--at-step", "90", "--steps", "80"])
