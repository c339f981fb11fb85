"""The root cause of a job whose rank stopped answering names that rank, not the rank
that gave up waiting for it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gcurun.errors import RankFailure, RanksFailedError
from gcurun.launch.api import ExitEvent
from gcurun.launch.supervision.supervise import JobState
from gcurun.launch.supervision.waited import ranks_waited_for
from tests.helpers import run_gcurun

STOPS_ITSELF = str(Path(__file__).resolve().parents[2] / "ranks" / "stops_itself.py")


@pytest.mark.parametrize(("line", "ranks"), [
    ("gcurun.runtime.api.CollectiveTimeout: allreduce 'x': no progress for 4 s waiting for "
     "rank 1, which sent nothing to rank 0 for 4.0 s (stopped, hung or unreachable, or "
     "waiting in turn for a rank that is)", (1,)),
    ("CollectiveTimeout: no progress for 300 s waiting for rank 2 and rank 3; it may be "
     "stuck", (2, 3)),
    ("CollectiveTimeout: allreduce 'x': no progress for 5 s waiting for ranks 1, 3 (not "
     "submitted there); they may be stuck", (1, 3)),
    ("ArgumentError: allreduce 'x': the stall inspector shut the job down: rank 4 did not "
     "answer for 6.0 s (GCURUN_STALL_CHECK_SHUTDOWN_SECONDS=6)", (4,)),
    ("PeerFailureError: allreduce 'x': the job was aborted: no progress for 4 s waiting "
     "for rank 1; it may be stuck (seen by rank 3) (this rank was itself waiting for rank "
     "2, which had sent nothing for 3.9 s)", (2,)),
    ("ValueError: waiting for rank 1 is what this script does", ()),
    ("Traceback (most recent call last):", ()),
])
def test_the_ranks_a_message_waited_for(line, ranks):
    assert ranks_waited_for(["something else", line]) == ranks


def state_with(running: set[int]) -> JobState:
    state = JobState({0: "a", 1: "a", 2: "b", 3: "b"})
    state.running = set(running)
    return state


def test_a_rank_that_gave_up_on_a_running_rank_blames_it():
    state = state_with({0, 1, 2, 3})
    tail = ("CollectiveTimeout: allreduce 'g': no progress for 4 s waiting for rank 2, "
            "which sent nothing",)
    assert state.on_exit(ExitEvent(0, exit_code=1), tail)
    assert state.failure is not None and state.failure.waited_for == ((2, "b"),)
    assert state.failure.describe_cause() == (
        "rank 2 on b did not arrive (root cause): rank 0 on a exited with code 1 after it "
        "gave up waiting for it")


def test_a_rank_that_waited_for_one_already_gone_is_the_root_cause_itself():
    state = state_with({0, 1, 3})
    tail = ("CollectiveTimeout: no progress for 4 s waiting for rank 2; it may be stuck",)
    assert state.on_exit(ExitEvent(0, exit_code=1), tail)
    assert state.failure is not None and state.failure.waited_for == ()
    assert state.failure.describe_cause() == "rank 0 on a exited with code 1 (root cause)"


def test_a_chain_of_waits_is_followed_to_the_rank_that_did_not_arrive():
    """Rank 3 gave up on rank 1, which (failing later) said it was itself waiting for
    rank 2: the root cause names rank 2, through rank 1."""
    state = state_with({0, 1, 2, 3})
    assert state.on_exit(ExitEvent(3, exit_code=1), (
        "CollectiveTimeout: allreduce 'g': no progress for 4 s waiting for rank 1; it "
        "may be stuck",))
    told = ("PeerFailureError: allreduce 'g': the job was aborted: no progress for 4 s "
            "waiting for rank 1; it may be stuck (seen by rank 3) (this rank was itself "
            "waiting for rank 2, which had sent nothing for 3.9 s)")
    assert not state.on_exit(ExitEvent(1, exit_code=1), (told,))
    assert not state.on_exit(ExitEvent(0, exit_code=1), (told,))
    with pytest.raises(RanksFailedError) as raised:
        state.outcome()
    assert raised.value.failure.describe_cause() == (
        "rank 2 on b did not arrive (root cause): rank 3 on b exited with code 1 after it "
        "gave up waiting for rank 1 on a, which waited in turn for it")
    assert raised.value.exit_code == 1


def test_a_failure_without_such_words_reads_as_before():
    failure = RankFailure(rank=3, host="b", signal=9)
    assert failure.describe_cause() == "rank 3 on b was killed by SIGKILL (root cause)"


@pytest.mark.integration
@pytest.mark.parametrize("launcher", ["local", "mpi"])
def test_the_root_cause_of_a_stopped_rank_names_it(launcher):
    args = ["-np", "2", "--grace-seconds", "1"] + (["--mpi"] if launcher == "mpi" else [])
    done = run_gcurun(*args, sys.executable, STOPS_ITSELF, "1", timeout=120,
                      env={"GCURUN_TIMEOUT_SECONDS": "4"})
    assert done.returncode == 1, done.stderr
    assert "gcurun: job failed: rank 1 on localhost did not arrive (root cause): rank 0 on " \
        "localhost exited with code 1 after it gave up waiting for it; every other rank was " \
        "stopped" in done.stderr, done.stderr


@pytest.mark.integration
def test_the_root_cause_of_a_stopped_rank_among_four_names_it():
    """Rank 3, the first to give up, waits for rank 1, which waits for the stopped rank
    2: whichever waiting rank fails first, the root cause is rank 2 (through rank 1's
    words when rank 3 came first)."""
    done = run_gcurun("-np", "4", "--grace-seconds", "1", sys.executable, STOPS_ITSELF,
                      "2", "3", timeout=120, env={"GCURUN_TIMEOUT_SECONDS": "6"})
    assert done.returncode == 1, done.stderr
    assert "gcurun: job failed: rank 2 on localhost did not arrive (root cause): rank " \
        in done.stderr, done.stderr
