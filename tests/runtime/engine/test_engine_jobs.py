"""The engine on real rank processes: ranks submitting the same tensors in different
orders amid other ops, mismatches, fusion edge cases, join; the timeline of a known job
(also of one killed mid-run); the stall inspector's warning and shutdown, also of a rank
stopped by SIGSTOP; unnamed ops from two threads at once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gcurun.rendezvous.server import RendezvousServer
from gcurun.runtime.timeline_summary import read_trace, summarize
from tests.helpers import run_gcurun, wait_for
from tests.runtime.jobs import MPIRUN, RANK_SCRIPTS, run_job, run_tcp

pytestmark = pytest.mark.integration
needs_mpi = pytest.mark.skipif(MPIRUN is None, reason="mpirun is not on PATH")

JOBS = [
    pytest.param("tcp", 1, {}, id="tcp-1"),
    pytest.param("tcp", 2, {}, id="tcp-2"),
    # A threshold smaller than most tensors, and a cache too small for the step (every
    # cycle evicts): correctness must not depend on either.
    pytest.param("tcp", 3, {"GCURUN_FUSION_THRESHOLD_MB": "0.001",
                            "GCURUN_CACHE_CAPACITY": "7", "GCURUN_CHUNK_BYTES": "65536"},
                 id="tcp-3-tiny-threshold-tiny-cache"),
    pytest.param("tcp", 2, {"GCURUN_FUSION_THRESHOLD_MB": "0"}, id="tcp-2-no-fusion"),
    pytest.param("mpi", 2, {}, id="mpi-2", marks=[pytest.mark.mpi, needs_mpi]),
    pytest.param("mpi", 3, {"HOROVOD_CYCLE_TIME": "3", "HOROVOD_CACHE_CAPACITY": "0"},
                 id="mpi-3-horovod-knobs-no-cache", marks=[pytest.mark.mpi, needs_mpi]),
]


def _counters(line: str) -> dict[str, int]:
    return {k: int(v) for k, v in (item.split("=") for item in line.split(", ")[1].split()
                                   if "=" in item)}


@pytest.mark.parametrize(("backend", "size", "env"), JOBS)
def test_the_engine_checks_on_processes(backend: str, size: int, env: dict) -> None:
    job = run_job(backend, size, "engine_checks.py", env=env, timeout=120)
    assert job.returncodes == [0] * len(job.returncodes), job.stdout + job.stderr
    for rank in range(size):
        lines = job.lines(f"rank {rank} of {size} ok:")
        assert len(lines) == 1, job.stdout + job.stderr
        counters = _counters(lines[0])
        if env.get("GCURUN_FUSION_THRESHOLD_MB") == "0":
            assert counters["fused"] == 0, lines[0]
        else:
            assert counters["fused"] > 0, lines[0]
        capacity = env.get("GCURUN_CACHE_CAPACITY", env.get("HOROVOD_CACHE_CAPACITY"))
        if capacity is None:
            # Steady state: every tensor is cached, so the one small exchange per cycle
            # is all the negotiation there is.
            assert counters["steady_uncached"] == 0, lines[0]
        elif capacity == "0":
            assert counters["steady_uncached"] > 0, lines[0]


def _spans(events: list[dict], row: int) -> list[tuple[str, str]]:
    return [(e["ph"], e["name"]) for e in sorted(events, key=lambda e: e.get("ts", 0))
            if e.get("pid") == row and e["ph"] in "BEXi"]


def test_the_timeline_of_a_known_job(tmp_path: Path) -> None:
    template = str(tmp_path / "trace-{rank}.json")
    job = run_tcp(2, "engine_timeline.py", env={"GCURUN_TIMELINE_FILENAME": template,
                                                 "GCURUN_TIMELINE_MARK_CYCLES": "1"})
    assert job.returncodes == [0, 0], job.stderr
    events = json.loads((tmp_path / "trace-0.json").read_text())
    rows = {e["args"]["name"]: e["pid"] for e in events if e["name"] == "process_name"}
    assert {"tl.fused.0", "tl.fused.1", "tl.fused.2", "tl.gather", "tl.bcast"} <= set(rows)
    # One fused batch: the small tensors are copied in and out, the large one is not.
    small, large = _spans(events, rows["tl.fused.0"]), _spans(events, rows["tl.fused.2"])
    for spans in (small, large):
        assert spans[0] == ("B", "NEGOTIATE_ALLREDUCE")
        assert {("i", "0"), ("i", "1")} <= set(spans[:spans.index(("E", "NEGOTIATE"))])
        body = spans[spans.index(("B", "ALLREDUCE")):spans.index(("E", "OP"))]
        assert ("X", "QUEUE") in body and ("X", "RING_REDUCESCATTER") in body \
            and ("X", "RING_ALLGATHER") in body, body
    assert ("X", "MEMCPY_IN_FUSION_BUFFER") in small and \
        ("X", "MEMCPY_OUT_FUSION_BUFFER") in small
    assert ("X", "MEMCPY_IN_FUSION_BUFFER") not in large
    assert ("B", "ALLGATHER") in _spans(events, rows["tl.gather"])
    assert ("B", "BROADCAST") in _spans(events, rows["tl.bcast"])
    assert any(e["name"] == "CYCLE_START" for e in events)
    # Every rank wrote its own trace; the summary reads it back.
    summary = summarize(read_trace(tmp_path / "trace-1.json"))
    assert {a.name for a in summary.activities} >= {"ALLREDUCE", "QUEUE", "RING_ALLGATHER",
                                                    "NEGOTIATE_ALLREDUCE"}
    assert {t.name for t in summary.tensors} == {"tl.fused.0", "tl.fused.1", "tl.fused.2",
                                                 "tl.gather", "tl.bcast"}


def test_a_killed_job_leaves_a_valid_trace(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"

    def kill_when_written(server: RendezvousServer, procs: list[subprocess.Popen]) -> None:
        def written() -> bool:
            try:
                return len(json.loads(trace.read_text())) > 200
            except (OSError, ValueError):
                return False

        wait_for("a trace with events", written, timeout=60)
        for proc in procs:
            os.kill(proc.pid, signal.SIGKILL)

    job = run_tcp(2, "engine_timeline.py", "hang", env={"GCURUN_TIMELINE_FILENAME": str(trace)},
                  while_running=kill_when_written, timeout=60)
    assert job.returncodes == [-signal.SIGKILL] * 2
    events = json.loads(trace.read_text())
    assert any(e.get("name") == "RING_REDUCESCATTER" for e in events)


def test_the_trace_stops_at_its_size_cap(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    job = run_tcp(2, "engine_timeline.py", env={"GCURUN_TIMELINE_FILENAME": str(trace),
                                                 "GCURUN_TIMELINE_MAX_MB": "0.005"})
    assert job.returncodes == [0, 0], job.stderr
    assert trace.stat().st_size <= 5243
    events = json.loads(trace.read_text())
    assert events[-1]["name"] == "TIMELINE_SIZE_CAP_REACHED"


@pytest.mark.parametrize("size", [2, 3])
def test_the_stall_inspector_names_tensor_and_ranks(size: int, tmp_path: Path) -> None:
    job = run_tcp(size, "engine_stall.py", "warn", str(tmp_path),
                  env={"GCURUN_STALL_CHECK_WARNING_SECONDS": "0.3"}, timeout=90)
    assert job.returncodes == [0] * size, job.stdout + job.stderr
    assert len(job.lines("rank")) == size
    missing = "rank 1" if size == 2 else "ranks 1, 2"
    warnings = [line for line in job.stderr.splitlines() if "'late.tensor': waited" in line]
    assert len(warnings) >= 2, job.stderr      # uncached, then cached
    assert all(line.endswith(f"s for {missing}") for line in warnings), warnings
    assert "tensors submitted by some ranks have waited more than 0.3 s" in job.stderr


@pytest.mark.parametrize("backend", ["tcp", pytest.param("mpi", marks=[pytest.mark.mpi,
                                                                        needs_mpi])])
def test_the_stall_inspector_shuts_a_stalled_job_down(backend: str, tmp_path: Path) -> None:
    job = run_job(backend, 2, "engine_stall.py", "shutdown", str(tmp_path),
                  env={"GCURUN_STALL_CHECK_WARNING_SECONDS": "0.2",
                       "GCURUN_STALL_CHECK_SHUTDOWN_SECONDS": "0.5"}, timeout=90)
    assert job.returncodes == [0] * len(job.returncodes), job.stdout + job.stderr
    stopped = job.lines("rank 0 raised: allreduce 'never.tensor': the stall inspector "
                        "shut the job down: allreduce 'never.tensor' waited")
    assert len(stopped) == 1 and stopped[0].endswith(
        "s for rank 1 (GCURUN_STALL_CHECK_SHUTDOWN_SECONDS=0.5)"), job.stdout
    refused = job.lines("rank 1 refused: allreduce 'after': the job failed earlier (the "
                        "stall inspector shut the job down")
    assert len(refused) == 1, job.stdout


def test_the_launchers_knobs_reach_the_engine(tmp_path: Path) -> None:
    """``gcurun --timeline-filename ... --fusion-threshold-mb ...``: the launcher's flags
    become the rank variables the engine reads."""
    trace = tmp_path / "trace.json"
    done = run_gcurun("-np", "2", "--timeline-filename", str(trace), "--timeline-mark-cycles",
                      "--fusion-threshold-mb", "0", sys.executable,
                      str(RANK_SCRIPTS / "engine_timeline.py"))
    assert done.returncode == 0, done.stderr
    events = json.loads(trace.read_text())
    assert any(e["name"] == "CYCLE_START" for e in events)
    # Fusion is off: no tensor was copied into a fusion buffer.
    assert not any(e["name"] == "MEMCPY_IN_FUSION_BUFFER" for e in events)
    assert any(e["name"] == "RING_ALLGATHER" for e in events)


STOPPED = [
    pytest.param("tcp", 2, id="tcp-2"),
    pytest.param("tcp", 4, id="tcp-4"),
    pytest.param("mpi", 2, id="mpi-2", marks=[pytest.mark.mpi, needs_mpi]),
    pytest.param("mpi", 4, id="mpi-4", marks=[pytest.mark.mpi, needs_mpi]),
]


@pytest.mark.parametrize(("backend", "size"), STOPPED)
def test_a_stopped_rank_is_named_by_the_stall_warning_and_the_timeout(
        backend: str, size: int, tmp_path: Path) -> None:
    """A rank stopped by SIGSTOP takes part in no cycle, so the coordinator's inspection
    never runs; every waiting rank's watch names the ranks its transport waits for, and
    the error every waiting rank raises names the rank that never answered: with two
    ranks, as the one the timeout waited for; with more, a rank may time out waiting for
    another that waits in turn, and the abort that reaches that one says whom it was
    waiting for itself (the stopped one is the rank that is named and names nobody)."""
    stopped = size // 2
    job = run_job(backend, size, "stopped_rank.py", str(tmp_path), str(stopped),
                  env={"GCURUN_STALL_CHECK_WARNING_SECONDS": "0.5",
                       "GCURUN_TIMEOUT_SECONDS": "4"}, timeout=90)
    waiting = [r for r in range(size) if r != stopped]
    warned = {r: job.lines(f"rank {r} logged: gcurun stall inspector: rank {r} has waited ")
              for r in range(size)}
    assert not warned[stopped], warned[stopped]
    assert all(warned[r] for r in waiting), job.stdout + job.stderr
    assert "which sent nothing in that time" in warned[waiting[0]][0]
    # "... has waited 1.1 s for rank 2, which sent ..." or "... for ranks 1, 2, which ..."
    named = {r: {int(n) for line in warned[r] for n in re.findall(
                 r"\d+", re.search(r" s for ranks? ([\d, ]+), which sent ", line)[1])}
             for r in waiting}
    assert stopped in set().union(*named.values()), named
    assert all(named[r] <= set(waiting) | {stopped} for r in waiting), named
    for rank in waiting:
        raised = job.lines(f"rank {rank} raised ")
        assert len(raised) == 1, job.stdout + job.stderr
        assert "allreduce 'after.stop'" in raised[0] and waited_in(raised[0]), raised
        if size == 2:
            assert "no progress for 4 s waiting for rank 1;" in raised[0], raised
    raised = [line for line in job.lines("rank ") if " raised " in line]
    assert any(stopped in waited_in(line) for line in raised), job.stdout
    for line in raised:
        if "this rank was itself waiting for " in line:
            assert "PeerFailureError" in line and "the job was aborted: " in line, line


def waited_in(line: str) -> set[int]:
    """The ranks a raised line says it (or the rank that aborted it) waited for:
    "waiting for rank 1", "... for rank 1 and rank 3", "... for ranks 1, 3"."""
    return {int(n) for match in re.findall(
        r"waiting for (ranks? \d+(?:(?:, | and | and rank )\d+)*)", line)
        for n in re.findall(r"\d+", match)}


def test_an_abort_that_reaches_a_waiting_rank_says_whom_it_waited_for(tmp_path: Path) -> None:
    """Rank 3, the first to give up, never waits for the stopped rank 2 itself (the
    negotiation's allgather brings it rank 2's block through another rank), so it names
    the rank it waited for; the abort it sends reaches that rank blocked on rank 2, and
    comes out there naming rank 2."""
    job = run_tcp(4, "stopped_rank.py", str(tmp_path), "2", "3",
                  env={"GCURUN_TIMEOUT_SECONDS": "6"}, timeout=90)
    first = job.lines("rank 3 raised ")
    prefix = ("rank 3 raised CollectiveTimeout: allreduce 'after.stop': no progress for 3 s "
              "waiting for rank ")
    assert first and first[0].startswith(prefix), job.stdout + job.stderr
    named = int(first[0][len(prefix):].split(";")[0])
    assert named in (0, 1), first
    told = job.lines(f"rank {named} raised ")
    assert told and told[0].startswith(
        f"rank {named} raised PeerFailureError: allreduce 'after.stop': the job was "
        f"aborted: no progress for 3 s waiting for rank {named};"), job.stdout + job.stderr
    assert "(seen by rank 3) (this rank was itself waiting for rank 2, which had sent " \
        "nothing for " in told[0], told


def test_the_stall_watch_follows_horovods_disable_switch(tmp_path: Path) -> None:
    job = run_tcp(2, "stopped_rank.py", str(tmp_path), "1",
                  env={"HOROVOD_STALL_CHECK_DISABLE": "1", "GCURUN_TIMEOUT_SECONDS": "2"},
                  timeout=60)
    assert job.lines("rank 0 raised CollectiveTimeout: allreduce 'after.stop': no progress "
                     "for 2 s waiting for rank 1;"), job.stdout + job.stderr
    assert "stall inspector" not in job.stdout, job.stdout


def test_the_stall_watch_shuts_a_job_with_a_stopped_rank_down(tmp_path: Path) -> None:
    job = run_tcp(3, "stopped_rank.py", str(tmp_path), "1",
                  env={"GCURUN_STALL_CHECK_WARNING_SECONDS": "0.3",
                       "GCURUN_STALL_CHECK_SHUTDOWN_SECONDS": "1",
                       "GCURUN_TIMEOUT_SECONDS": "120"}, timeout=60)
    for rank in (0, 2):
        raised = job.lines(f"rank {rank} raised ")
        assert len(raised) == 1, job.stdout + job.stderr
        assert "the stall inspector shut the job down: rank 1 did not answer for " in \
            raised[0] and "(GCURUN_STALL_CHECK_SHUTDOWN_SECONDS=1)" in raised[0], raised


@pytest.mark.parametrize("backend", ["tcp", pytest.param("mpi", marks=[pytest.mark.mpi,
                                                                        needs_mpi])])
def test_unnamed_allreduces_from_two_threads_are_right_or_refused(backend: str) -> None:
    """Unnamed ops are matched by the order of the calls, which two threads calling at
    once do not keep alike on every rank: each op pairs one thread's tensors with the
    same thread's, or fails on every rank, never a silently wrong sum."""
    calls = 200
    job = run_job(backend, 2, "unnamed_threads.py", str(calls), timeout=120)
    assert job.returncodes == [0] * len(job.returncodes), job.stdout + job.stderr
    for rank in range(2):
        for worker in ("worker-1", "worker-1000"):
            tally = job.lines(f"rank {rank} {worker}: right=")
            assert len(tally) == 1, job.stdout + job.stderr
            counts = dict(item.split("=") for item in tally[0].split(": ")[1].split())
            assert counts["wrong"] == "0", tally
            assert int(counts["right"]) + int(counts["errors"]) == calls, tally
            for line in job.lines(f"rank {rank} {worker} first error: "):
                assert "this unnamed op came from different threads on different ranks" \
                    in line and "Give each op a name (name=...)" in line, line
        assert job.lines(f"rank {rank} then named: [2.0, 2.0]"), job.stdout
