"""Messages that name the real cause: a bad working directory, a directory given as the
program, a rank that left an mpirun job early, mpirun's noise, the rendezvous' warnings."""

from __future__ import annotations

import io
import queue
import shutil
import sys

import pytest

from gcurun.hosts.api import HostSpec
from gcurun.launch.api import Event, LauncherNoticeEvent
from gcurun.launch.mpi.command import MPIFlavour
from gcurun.launch.mpi.rank_group import MpiRankGroup, MpirunCommand, parse_mpirun_failure
from gcurun.launch.planning.plan import build_plan
from gcurun.launch.supervision.output import OutputSink
from tests.helpers import run_gcurun

needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")


def test_a_working_directory_that_is_a_file_is_named_as_such(tmp_path):
    res = run_gcurun("--workdir", "/etc/passwd", "-np", "1", "touch", str(tmp_path / "ran"))
    assert res.returncode == 2
    assert res.stderr == ("gcurun: error: --workdir '/etc/passwd': not a directory on this "
                          "host, where ranks start; create it or give an existing "
                          "directory\n")
    assert not (tmp_path / "ran").exists()


def test_a_directory_given_as_the_program_is_named_as_such(tmp_path):
    res = run_gcurun("-np", "1", str(tmp_path))
    assert res.returncode == 1
    assert res.stderr == (f"gcurun: error: rank 0: cannot run '{tmp_path}': it is a "
                          "directory; give the program to run in it\n")


OMPI5_IMPROPER = """\
--------------------------------------------------------------------------
prterun has exited due to process rank 1 with PID 1630 on node vm exiting
improperly. There are three reasons this could occur:

1. this process did not call "init" before exiting, but others in the
job did. This can cause a job to hang indefinitely while it waits for
--------------------------------------------------------------------------
"""
OMPI4_IMPROPER = """\
mpirun has exited due to process rank 2 with PID 0 on
node n1 exiting improperly. There are three reasons this could occur:
"""


def test_a_rank_leaving_an_mpirun_job_early_is_the_one_named():
    for text, rank in ((OMPI5_IMPROPER, 1), (OMPI4_IMPROPER, 2)):
        failure = parse_mpirun_failure(text)
        assert failure is not None and (failure.rank, failure.improper) == (rank, True)


@needs_mpirun
def test_under_mpi_the_rank_that_left_early_is_the_root_cause_in_a_few_lines(tmp_path):
    script = tmp_path / "leave.py"
    script.write_text(
        "import os, sys, time\nimport gcurun.runtime as hvd\nhvd.init()\n"
        "if hvd.rank() == 1:\n    time.sleep(1)\n    os._exit(0)\n"
        "hvd.barrier()\n")
    res = run_gcurun("--mpi", "-np", "2", "--grace-seconds", "2", sys.executable,
                     str(script))
    assert res.returncode == 1, res.stderr
    cause = res.stderr[res.stderr.index("gcurun: job failed:"):]
    assert cause.startswith("gcurun: job failed: rank 1 on localhost exited with code 1 "
                            "(root cause)"), res.stderr
    assert "mpirun reported that it exited without calling MPI_Finalize" in cause
    assert "three reasons" not in cause and len(cause.splitlines()) <= 4, cause


def test_mpiruns_words_about_a_stop_gcurun_asked_for_are_not_shown(tmp_path):
    plan = build_plan([HostSpec("localhost", 2)], ["true"], launcher="mpi")
    events: queue.Queue[Event] = queue.Queue()
    group = MpiRankGroup(plan, MpirunCommand(("mpirun",)), MPIFlavour("openmpi", "5.0.1"))
    group._launcher_line("prterun: a message before any stop\n", events)
    group._launcher_line("Abort is in progress...hit ctrl-c again to forcibly terminate\n",
                         events)
    group.terminate(1.0)   # nothing started: only marks the group as stopping
    group._launcher_line("prterun noticed that process rank 0 exited on signal 15.\n", events)
    assert list(events.queue) == [
        LauncherNoticeEvent("mpirun", "prterun: a message before any stop\n")]


def test_a_launcher_programs_own_line_reaches_the_consoles_stderr_with_its_name():
    out, err = io.StringIO(), io.StringIO()
    sink = OutputSink(out, err)
    sink.notice(LauncherNoticeEvent("srun", "srun: job 5 queued\n"))
    sink.finish_all()
    assert (out.getvalue(), err.getvalue()) == ("", "[srun] srun: job 5 queued\n")


def test_rendezvous_warnings_carry_the_prefix_and_one_form_of_address(tmp_path):
    knock = ("import os, socket, time\n"
             "host, port = os.environ['GCURUN_RENDEZVOUS'].rsplit(':', 1)\n"
             "if os.environ['GCURUN_RANK'] == '0':\n"
             "    s = socket.create_connection((host, int(port)))\n"
             "    s.recv(64); s.sendall(b'x' * 64); time.sleep(1)\n")
    res = run_gcurun("-np", "2", sys.executable, "-c", knock)
    assert res.returncode == 0, res.stderr
    warning = [line for line in res.stderr.splitlines() if "rendezvous" in line]
    assert len(warning) == 1, res.stderr
    assert warning[0].startswith("gcurun: warning: rendezvous 127.0.0.1:")
    assert ": refused the connection from 127.0.0.1:" in warning[0]
    assert warning[0].endswith(": failed authentication (wrong secret, or not a gcurun rank)")
