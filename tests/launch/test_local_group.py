"""Real local jobs through run_job (prepare, then execute): real processes, real signals,
psutil checks."""

from __future__ import annotations

import io
import signal
import sys
import threading

import pytest

from gcurun.config.api import Settings
from gcurun.errors import JobInterrupted, LaunchError, RanksFailedError
from gcurun.hosts.api import HostSpec
from gcurun.launch.execute import run_job
from gcurun.launch.planning.plan import build_plan
from gcurun.launch.supervision.output import OutputSink
from tests.helpers import RANKS, all_pids, read_ranks, survivors, wait_for

pytestmark = pytest.mark.integration

WORKER = str(RANKS / "worker.py")


def job(tmp_path, np, *args, grace=2.0):
    plan = build_plan((HostSpec("localhost", np),), [sys.executable, WORKER, str(tmp_path),
                                                     *args], workdir=str(tmp_path))
    out, err = io.StringIO(), io.StringIO()
    sink = OutputSink(out, err, output_dir=str(tmp_path / "logs"))
    return plan, Settings(grace_seconds=grace), sink, out, err


def test_success_gives_each_rank_its_identity(tmp_path):
    plan, settings, sink, out, _ = job(tmp_path, 3, "--linger", "0")
    run_job(plan, settings, sink)
    records = read_ranks(tmp_path, 3)
    for rank, rec in enumerate(records):
        env = rec["env"]
        assert (env["GCURUN_RANK"], env["GCURUN_SIZE"], env["LOCAL_RANK"]) == \
               (str(rank), "3", str(rank))
        assert env["TOPS_VISIBLE_DEVICES"] == "0,1,2" and env["GCURUN_DEVICE"] == str(rank)
        assert rec["cwd"] == str(tmp_path)
    lines = sorted(out.getvalue().splitlines())
    assert lines == [f"[{r}] rank {r} of 3 ready" for r in range(3)]
    assert (tmp_path / "logs" / "rank-2.stdout.log").read_text() == "rank 2 of 3 ready\n"


def test_failing_rank_stops_every_rank_and_grandchild(tmp_path):
    plan, settings, sink, _, _ = job(tmp_path, 3, "--fail-rank", "1", "--code", "3",
                                     "--grandchild")
    with pytest.raises(RanksFailedError) as err:
        run_job(plan, settings, sink)
    assert (err.value.failure.rank, err.value.exit_code) == (1, 3)
    assert err.value.failure.stderr_tail == ("rank 1 failing on purpose",)
    assert survivors(all_pids(read_ranks(tmp_path, 3))) == []


def test_rank_killed_by_sigkill(tmp_path):
    plan, settings, sink, _, _ = job(tmp_path, 2, "--signal-rank", "0", "--grandchild")
    with pytest.raises(RanksFailedError) as err:
        run_job(plan, settings, sink)
    assert err.value.failure.signal == signal.SIGKILL and err.value.exit_code == 137
    assert survivors(all_pids(read_ranks(tmp_path, 2))) == []


def test_rank_ignoring_sigterm_is_killed_after_grace(tmp_path):
    script = tmp_path / "stubborn.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "open(os.path.join(sys.argv[1], 'rank-%s.pid' % os.environ['RANK']), 'w')"
        ".write(str(os.getpid()))\n"
        "if os.environ['RANK'] == '0':\n"
        "    time.sleep(0.5); sys.exit(5)\n"
        "time.sleep(60)\n")
    plan = build_plan((HostSpec("localhost", 2),), [sys.executable, str(script), str(tmp_path)])
    with pytest.raises(RanksFailedError) as err:
        run_job(plan, Settings(grace_seconds=0.5), OutputSink(io.StringIO(), io.StringIO()))
    assert err.value.exit_code == 5
    pid = int((tmp_path / "rank-1.pid").read_text())
    assert survivors([pid]) == []


def test_sigint_to_launcher_stops_job(tmp_path):
    plan, settings, sink, _, _ = job(tmp_path, 2, "--grandchild")
    import os

    def interrupt():
        wait_for("both ranks ready", lambda: all(
            (tmp_path / f"rank-{r}.json").exists() for r in range(2)))
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=interrupt)
    t.start()
    with pytest.raises(JobInterrupted) as err:
        run_job(plan, settings, sink)
    t.join()
    assert err.value.exit_code == 130
    assert survivors(all_pids(read_ranks(tmp_path, 2))) == []


def test_missing_program_is_a_launch_error_and_starts_nothing(tmp_path):
    plan = build_plan((HostSpec("localhost", 2),), ["no-such-program-xyz"])
    with pytest.raises(LaunchError) as err:
        run_job(plan, Settings(), OutputSink(io.StringIO(), io.StringIO()))
    assert str(err.value) == ("rank 0: cannot run 'no-such-program-xyz': no such program "
                              "on PATH; check the command's spelling or give its full path")
