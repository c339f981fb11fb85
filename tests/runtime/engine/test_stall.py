"""The stall inspector's bookkeeping, on a fake clock."""

from __future__ import annotations

from gcurun.runtime.api import Blocked
from gcurun.runtime.engine.stall import (
    SilenceWatch,
    StallInspector,
    format_ranks,
    stall_warning,
)


def test_warnings_reports_and_shutdown_follow_the_clock() -> None:
    inspector = StallInspector(4, warning_seconds=10, shutdown_seconds=30, report_seconds=5)
    waiting = {"w": ("allreduce", frozenset({0, 2}))}
    assert inspector.observe(waiting, 100.0) == ([], [], None)
    warn, report, shutdown = inspector.observe(waiting, 106.0)
    assert not warn and [s.missing for s in report] == [(1, 3)] and shutdown is None
    warn, report, _ = inspector.observe(waiting, 111.0)
    assert [(s.name, s.waited, s.missing) for s in warn] == [("w", 11.0, (1, 3))]
    assert not report                                   # reported once
    assert inspector.observe(waiting, 115.0)[0] == []   # warned again only after 10 s
    assert len(inspector.observe(waiting, 121.5)[0]) == 1
    less = {"w": ("allreduce", frozenset({0, 1, 2}))}
    _, report, shutdown = inspector.observe(less, 131.0)
    assert [s.missing for s in report] == [(3,)]        # the missing ranks changed
    assert shutdown is not None and shutdown.waited == 31.0
    assert inspector.observe({}, 132.0) == ([], [], None)
    assert inspector.observe(waiting, 133.0) == ([], [], None)   # a new wait


def test_zero_disables_warnings_and_shutdown() -> None:
    inspector = StallInspector(2, warning_seconds=0, shutdown_seconds=0, report_seconds=1)
    waiting = {"w": ("allgather", frozenset({0}))}
    inspector.observe(waiting, 0.0)
    warn, report, shutdown = inspector.observe(waiting, 1e6)
    assert not warn and shutdown is None and len(report) == 1


def test_the_warning_text() -> None:
    inspector = StallInspector(3, 1, 0, 1)
    inspector.observe({"g.1": ("allreduce", frozenset({0}))}, 0.0)
    warn, _, _ = inspector.observe({"g.1": ("allreduce", frozenset({0}))}, 2.5)
    text = stall_warning(warn, 1)
    assert "tensors submitted by some ranks have waited more than 1 s" in text
    assert "  allreduce 'g.1': waited 2.5 s for ranks 1, 2" in text
    assert format_ranks([3]) == "rank 3"
    assert format_ranks(range(10)) == "ranks 0, 1, 2, 3, 4, 5, 6, 7 and 2 more"


def test_the_silence_watch_warns_each_period_and_shuts_down_on_the_clock() -> None:
    watch = SilenceWatch(0, warning_seconds=5, shutdown_seconds=12)
    assert watch.interval == 1.0
    assert watch.observe(None, 100.0) == (None, None)
    wait = Blocked((1,), 100.0)
    assert watch.observe(wait, 104.0) == (None, None)
    warn, shutdown = watch.observe(wait, 105.5)
    assert warn is not None and shutdown is None
    assert warn.startswith("gcurun stall inspector: rank 0 has waited 5.5 s for rank 1, "
                           "which sent nothing in that time")
    assert watch.observe(wait, 108.0) == (None, None)       # again only after 5 s
    warn, shutdown = watch.observe(wait, 112.0)
    assert warn is not None and shutdown is not None
    assert shutdown.startswith("the stall inspector shut the job down: rank 1 did not "
                               "answer for 12.0 s (GCURUN_STALL_CHECK_SHUTDOWN_SECONDS=12)")
    assert watch.observe(Blocked((2, 3), 112.5), 113.0) == (None, None)    # a new wait


def test_the_silence_watch_is_off_with_both_times_zero() -> None:
    assert SilenceWatch(0, 0, 0).interval == 0
    assert SilenceWatch(0, 0.2, 0).interval == 0.05
