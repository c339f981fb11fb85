"""Real jobs under this host's mpirun: identity, failures, signals, nothing left behind."""

from __future__ import annotations

import io
import shutil
import signal
import sys
import threading

import psutil
import pytest

from gcurun.config.api import MPISettings, Settings
from gcurun.errors import JobInterrupted, LaunchError, RanksFailedError
from gcurun.hosts.api import HostSpec
from gcurun.launch.execute import run_job
from gcurun.launch.planning.plan import build_plan
from gcurun.launch.supervision.output import OutputSink
from tests.helpers import RANKS, all_pids, read_ranks, run_gcurun, survivors, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.mpi,
              pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")]

WORKER = str(RANKS / "worker.py")


def job(tmp_path, np, *args, grace=2.0, **settings):
    plan = build_plan((HostSpec("localhost", np),), [sys.executable, WORKER, str(tmp_path),
                                                     *args],
                      launcher="mpi", workdir=str(tmp_path), job_env={"FOO": "bar"})
    out, err = io.StringIO(), io.StringIO()
    sink = OutputSink(out, err, output_dir=str(tmp_path / "logs"))
    return plan, Settings(launcher="mpi", grace_seconds=grace, **settings), sink, out, err


def test_ranks_see_the_plan_environment(tmp_path):
    plan, settings, sink, out, _ = job(tmp_path, 3, "--linger", "0")
    run_job(plan, settings, sink)
    for spec, rec in zip(plan.ranks, read_ranks(tmp_path, 3), strict=True):
        env = rec["env"]
        for name, value in spec.env.items():
            assert env[name] == value, f"rank {spec.rank}: {name}"
        assert "OMPI_COMM_WORLD_RANK" in env       # it really ran under mpirun
        assert rec["cwd"] == str(tmp_path)
    assert sorted(out.getvalue().splitlines()) == [f"[{r}] rank {r} of 3 ready"
                                                   for r in range(3)]
    assert (tmp_path / "logs" / "rank-1.stdout.log").read_text() == "rank 1 of 3 ready\n"


def test_failing_rank_fails_the_job_and_nothing_survives(tmp_path):
    plan, settings, sink, _, _ = job(tmp_path, 3, "--fail-rank", "1", "--code", "3",
                                     "--grandchild")
    with pytest.raises(RanksFailedError) as err:
        run_job(plan, settings, sink)
    assert (err.value.failure.rank, err.value.exit_code) == (1, 3)
    assert err.value.failure.stderr_tail == ("rank 1 failing on purpose",)
    assert err.value.failure.error_text == "mpirun reported it as the first rank to fail"
    assert survivors(all_pids(read_ranks(tmp_path, 3))) == []


def test_rank_killed_by_a_signal(tmp_path):
    plan, settings, sink, _, _ = job(tmp_path, 2, "--signal-rank", "0")
    with pytest.raises(RanksFailedError) as err:
        run_job(plan, settings, sink)
    assert err.value.failure.rank == 0
    assert err.value.failure.signal == signal.SIGKILL and err.value.exit_code == 137
    assert survivors(all_pids(read_ranks(tmp_path, 2))) == []


def test_interrupt_stops_every_rank(tmp_path):
    import queue

    from gcurun.launch.mpi.rank_group import mpi_groups
    from gcurun.launch.prepare import prepare_plan
    from gcurun.launch.supervision.supervise import InterruptEvent, supervise

    plan, settings, sink, _, _ = job(tmp_path, 2, "--grandchild")
    events: queue.Queue = queue.Queue()
    groups = mpi_groups(prepare_plan(plan, settings), {})
    groups[0].start(events)
    wait_for("both ranks", lambda: all((tmp_path / f"rank-{r}.json").exists()
                                       for r in range(2)))
    threading.Timer(0.1, events.put, (InterruptEvent(2, "SIGINT"),)).start()
    with pytest.raises(JobInterrupted) as err:
        supervise(groups, events, {0: "localhost", 1: "localhost"}, sink, grace_seconds=2)
    assert err.value.exit_code == 130
    assert survivors(all_pids(read_ranks(tmp_path, 2)) + list(groups[0].pids().values())) == []


def test_shell_script_command(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text('echo "rank $GCURUN_RANK of $HOROVOD_SIZE device $GCURUN_DEVICE of '
                      '$TOPS_VISIBLE_DEVICES"\n')
    plan = build_plan((HostSpec("localhost", 2),), ["bash", str(script)], launcher="mpi",
                      workdir=str(tmp_path))
    out = io.StringIO()
    run_job(plan, Settings(launcher="mpi"), OutputSink(out, io.StringIO()))
    assert sorted(out.getvalue().splitlines()) == ["[0] rank 0 of 2 device 0 of 0,1",
                                                   "[1] rank 1 of 2 device 1 of 0,1"]


def test_missing_mpirun_is_a_launch_error(tmp_path):
    plan, _, sink, _, _ = job(tmp_path, 1)
    with pytest.raises(LaunchError, match="mpirun 'no-such-mpirun' was not found"):
        run_job(plan, Settings(launcher="mpi", mpi=MPISettings(mpirun="no-such-mpirun")), sink)


def test_bind_to_core_binds_each_rank_to_its_own_core(tmp_path):
    plan, settings, sink, _, _ = job(tmp_path, 2, "--linger", "0", bind_to="core",
                                     map_by="slot")
    run_job(plan, settings, sink)
    records = read_ranks(tmp_path, 2)
    affinities = [tuple(r["affinity"]) for r in records]
    assert all(len(a) == 1 for a in affinities) and len(set(affinities)) == 2
    assert [r["env"]["OMP_NUM_THREADS"] for r in records] == ["1", "1"]


def job_processes(token: str) -> list[str]:
    """The live processes (not zombies) whose command line holds ``token``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and \
                token in " ".join(proc.info["cmdline"] or ()):
            found.append(f"{proc.pid}: {' '.join(proc.info['cmdline'])}")
    return found


def test_gcurun_returns_only_when_no_process_of_the_failed_job_is_left(tmp_path):
    # Rank 1 fails once both ranks run; rank 0, its grandchild and both ranks' guards
    # (forked by the shim, so their command lines still name tmp_path) must all be gone
    # by the time gcurun has said the job failed.
    res = run_gcurun("--mpi", "-np", "2", "--grace-seconds", "2", sys.executable, WORKER,
                     str(tmp_path), "--fail-rank", "1", "--code", "3", "--grandchild")
    assert res.returncode == 3, res.stderr
    assert "every other rank was stopped" in res.stderr
    assert job_processes(str(tmp_path)) == []
    assert survivors(all_pids(read_ranks(tmp_path, 2)), timeout=0) == []
