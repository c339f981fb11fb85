"""gcurun.spark.run on the run's local-cluster session (tests/spark/conftest.py)."""

from __future__ import annotations

import os

import pytest


def _identity():
    return {name: os.environ.get(name) for name in (
        "GCURUN_RANK", "GCURUN_SIZE", "GCURUN_LOCAL_RANK", "GCURUN_LOCAL_SIZE",
        "GCURUN_CROSS_RANK", "GCURUN_HOSTNAME", "TOPS_VISIBLE_DEVICES", "GCURUN_DEVICE",
        "FROM_ENV", "DRIVER_ONLY")} | {"pid": os.getpid(), "ppid": os.getppid()}


def test_run_one_rank_per_task_in_rank_order(spark, monkeypatch):
    import gcurun.spark

    monkeypatch.setenv("DRIVER_ONLY", "yes")
    found = gcurun.spark.run(_identity, env={"FROM_ENV": "1"}, start_timeout=120)
    assert [f["GCURUN_RANK"] for f in found] == ["0", "1"]
    assert all(f["GCURUN_SIZE"] == "2" for f in found)
    # Both executors run on this host: ranks grouped by host, local ranks 0 and 1.
    assert [f["GCURUN_LOCAL_RANK"] for f in found] == ["0", "1"]
    assert [f["TOPS_VISIBLE_DEVICES"] for f in found] == ["0,1", "0,1"]
    assert [f["GCURUN_DEVICE"] for f in found] == ["0", "1"]
    assert all(f["FROM_ENV"] == "1" and f["DRIVER_ONLY"] is None for f in found)
    assert len({f["ppid"] for f in found}) == 2
