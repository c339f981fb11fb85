"""The engine's knobs: GCURUN_* variables, and Horovod's names for scripts run directly
under mpirun."""

from __future__ import annotations

import pytest

from gcurun.errors import UsageError
from gcurun.runtime.settings import parse_runtime_env


def test_defaults() -> None:
    env = parse_runtime_env({})
    assert (env.fusion_threshold_mb, env.cycle_time_ms, env.cache_capacity) == (64, 1, 1024)
    assert (env.stall_check_warning_seconds, env.stall_check_shutdown_seconds) == (60, 0)
    assert env.timeline is None and not env.timeline_mark_cycles


def test_horovod_names_are_understood() -> None:
    env = parse_runtime_env({
        "HOROVOD_FUSION_THRESHOLD": str(32 << 20), "HOROVOD_CYCLE_TIME": "5",
        "HOROVOD_TIMELINE": "/tmp/h.json", "HOROVOD_TIMELINE_MARK_CYCLES": "1",
        "HOROVOD_STALL_CHECK_TIME_SECONDS": "30", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "90",
        "HOROVOD_CACHE_CAPACITY": "0"})
    assert (env.fusion_threshold_mb, env.cycle_time_ms, env.timeline) == (32, 5, "/tmp/h.json")
    assert env.timeline_mark_cycles and env.cache_capacity == 0
    assert (env.stall_check_warning_seconds, env.stall_check_shutdown_seconds) == (30, 90)
    assert parse_runtime_env({"HOROVOD_STALL_CHECK_DISABLE": "1"}
                             ).stall_check_warning_seconds == 0


@pytest.mark.parametrize("name", ["GCURUN_TIMELINE_FILENAME", "HOROVOD_TIMELINE"])
def test_a_dynamic_timeline_writes_no_file_at_start(name: str) -> None:
    # Horovod's HOROVOD_TIMELINE=DYNAMIC: the script calls start_timeline() itself.
    assert parse_runtime_env({name: "DYNAMIC"}).timeline is None
    assert parse_runtime_env({name: "dynamic.json"}).timeline == "dynamic.json"


def test_gcurun_names_win_over_horovod_names() -> None:
    env = parse_runtime_env({"GCURUN_CYCLE_TIME_MS": "2", "HOROVOD_CYCLE_TIME": "7",
                             "GCURUN_FUSION_THRESHOLD_MB": "8",
                             "HOROVOD_FUSION_THRESHOLD": "1",
                             "GCURUN_STALL_CHECK_WARNING_SECONDS": "5",
                             "HOROVOD_STALL_CHECK_DISABLE": "1"})
    assert (env.cycle_time_ms, env.fusion_threshold_mb) == (2, 8)
    assert env.stall_check_warning_seconds == 5


@pytest.mark.parametrize(("variables", "message"), [
    ({"HOROVOD_CYCLE_TIME": "soon"}, "HOROVOD_CYCLE_TIME='soon': not a number"),
    ({"HOROVOD_FUSION_THRESHOLD": "-1"}, "HOROVOD_FUSION_THRESHOLD='-1': must be 0 or more"),
    ({"GCURUN_CACHE_CAPACITY": "-3"}, "GCURUN_CACHE_CAPACITY='-3': expected an integer >= 0"),
    ({"GCURUN_TIMELINE_MAX_MB": "0"}, "GCURUN_TIMELINE_MAX_MB='0': must be greater than 0"),
])
def test_bad_values_name_the_variable_they_came_from(variables: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_runtime_env(variables)
