"""The trace writer (valid JSON after every flush, size cap, which ranks write), the
summary, and ``gcurun timeline summary``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from gcurun.cli.timeline import timeline as timeline_cli
from gcurun.errors import UsageError
from gcurun.runtime.api import ReduceOp
from gcurun.runtime.engine.background import Engine
from gcurun.runtime.engine.timeline import Timeline, timeline_path
from gcurun.runtime.frontend.collectives import Collectives
from gcurun.runtime.timeline_summary import format_summary, parse_trace, summarize
from tests.runtime.engines import run_engines

MS = 1_000_000


def write_job(path: Path, **kw: object) -> Timeline:
    tl = Timeline(str(path), max_bytes=kw.pop("max_bytes", 1 << 20),  # type: ignore[arg-type]
                  mark_cycles=True, rank=0, size=2)
    base = tl._start_ns
    tl.cycle(base)
    for name, cost in (("grad.a", 3), ("grad.b", 1)):
        tl.negotiate_start(name, "ALLREDUCE", base)
        tl.negotiate_rank(name, 0, base)
        tl.negotiate_rank(name, 1, base + 2 * MS)
        tl.negotiate_end(name, base + 2 * MS)
        tl.op_start(name, "ALLREDUCE", base + 2 * MS)
        tl.activity(name, "QUEUE", base + 2 * MS, base + 3 * MS)
        tl.activity(name, "RING_REDUCESCATTER", base + 3 * MS, base + (3 + cost) * MS)
        tl.op_end(name, base + (3 + cost) * MS)
    return tl


def test_the_file_is_valid_json_after_every_flush(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    tl = write_job(path)
    assert json.loads(path.read_text()) == []          # nothing flushed yet, still valid
    tl.flush()
    first = json.loads(path.read_text())
    tl.activity("grad.a", "MEMCPY_OUT_FUSION_BUFFER", tl._start_ns, tl._start_ns + 1000)
    tl.flush()
    second = json.loads(path.read_text())
    assert len(second) == len(first) + 1
    tl.close()
    assert json.loads(path.read_text()) == second
    names = {e["args"]["name"] for e in second if e["name"] == "process_name"}
    assert names == {"gcurun engine (rank 0 of 2)", "grad.a", "grad.b"}


def test_the_size_cap_ends_the_trace_with_a_marker(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    tl = write_job(path, max_bytes=4096)
    for i in range(200):
        tl.activity("grad.a", "QUEUE", tl._start_ns + i, tl._start_ns + i + 1)
    tl.flush()
    tl.activity("grad.a", "QUEUE", tl._start_ns, tl._start_ns + 1)
    tl.close()
    events = json.loads(path.read_text())
    assert events[-1]["name"] == "TIMELINE_SIZE_CAP_REACHED"
    assert path.stat().st_size <= 4096


def test_which_ranks_write() -> None:
    assert timeline_path("/t/x.json", 0) == "/t/x.json"
    assert timeline_path("/t/x.json", 1) is None
    assert timeline_path("/t/x-{rank}.json", 3) == "/t/x-3.json"


def test_an_unwritable_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError,
                       match="GCURUN_TIMELINE_FILENAME=.*cannot write the timeline there"):
        Timeline(str(tmp_path / "missing" / "t.json"), max_bytes=1 << 20,
                 mark_cycles=False, rank=0, size=1)


def test_the_summary_totals_activities_and_ranks_tensors(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    write_job(path).close()
    summary = summarize(parse_trace(path.read_text()))
    totals = {a.name: (a.count, round(a.total_us)) for a in summary.activities}
    assert totals["RING_REDUCESCATTER"] == (2, 4000)
    assert totals["NEGOTIATE_ALLREDUCE"] == (2, 4000)
    assert totals["ALLREDUCE"] == (2, 6000)
    assert [(t.name, round(t.op_us), round(t.negotiate_us)) for t in summary.tensors] == [
        ("grad.a", 4000, 2000), ("grad.b", 2000, 2000)]
    assert summary.cycles == 1 and not summary.truncated
    # A trace cut before its closing bracket (other writers) still reads.
    cut = path.read_text().rstrip().rstrip("]").rstrip() + ","
    assert len(parse_trace(cut)) == summary.events
    text = format_summary(summary, top=1)
    assert "costliest tensors (top 1 of 2)" in text and "grad.a" in text
    assert "grad.b " not in text


def test_the_cli_prints_the_summary_and_names_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    write_job(path).close()
    runner = CliRunner()
    done = runner.invoke(timeline_cli, ["summary", str(path), "--top", "5"])
    assert done.exit_code == 0, done.output
    assert "RING_REDUCESCATTER" in done.output and "grad.b" in done.output
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    done = runner.invoke(timeline_cli, ["summary", str(junk)], standalone_mode=False)
    assert isinstance(done.exception, UsageError)
    assert str(done.exception) == (f"{junk}: not a Chrome trace (JSON array of events); "
                                   "give the file GCURUN_TIMELINE_FILENAME named")


def test_the_timeline_starts_switches_and_stops_while_the_engines_run(tmp_path: Path) -> None:
    # Horovod's start_timeline/stop_timeline: rank 0 writes; a new file closes the old one
    # complete; the same file again goes on.
    first, second = tmp_path / "first.json", tmp_path / "second.json"

    def body(engine: Engine) -> None:
        comm = Collectives(engine)
        comm.allreduce(np.ones(3), ReduceOp.SUM, 1.0, 1.0, "before")
        engine.set_timeline(str(first), mark_cycles=True)
        comm.allreduce(np.ones(3), ReduceOp.SUM, 1.0, 1.0, "in.first")
        comm.barrier()
        engine.set_timeline(str(second), mark_cycles=False)
        comm.allreduce(np.ones(3), ReduceOp.SUM, 1.0, 1.0, "in.second")
        engine.set_timeline(str(second), mark_cycles=False)
        comm.allreduce(np.ones(3), ReduceOp.SUM, 1.0, 1.0, "in.second.again")
        engine.set_timeline(None)
        comm.allreduce(np.ones(3), ReduceOp.SUM, 1.0, 1.0, "after")

    run_engines(2, body)
    one, two = json.loads(first.read_text()), json.loads(second.read_text())

    def rows(trace: list) -> set:
        return {e["args"]["name"] for e in trace if e["name"] == "process_name"}

    assert rows(one) >= {"in.first"} and not rows(one) & {"before", "in.second", "after"}
    assert rows(two) >= {"in.second", "in.second.again"} and "after" not in rows(two)
    assert any(e["name"] == "CYCLE_START" for e in one)
    assert not any(e["name"] == "CYCLE_START" for e in two)
    assert {"NEGOTIATE_ALLREDUCE", "ALLREDUCE"} <= {e["name"] for e in one}
    start = one[0]["args"]["start_time_since_epoch_in_micros"]
    assert abs(start / 1e6 - time.time()) < 3600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.json", "second.json"]
