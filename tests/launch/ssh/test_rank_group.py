"""The SSH rank group against a real bootstrap over pipes (no SSH): events, exits, stops,
lost connections."""

from __future__ import annotations

import io
import os
import queue
import signal

import pytest

from gcurun.errors import RanksFailedError
from gcurun.launch.api import Binding, ExecutorErrorEvent, ExitEvent, OutputEvent, RankSpec
from gcurun.launch.ssh.rank_group import SSHRankGroup
from gcurun.launch.supervision.output import OutputSink
from gcurun.launch.supervision.supervise import supervise
from tests.helpers import wait_for
from tests.launch.remote.bootstrap_pipe import pipe_session


def spec(rank, *argv, env=None, binding=None):
    return RankSpec(rank=rank, local_rank=rank, local_size=2, cross_rank=0, cross_size=1,
                    node_rank=0, host="nodeA", is_local=False, device=None, argv=argv,
                    env=env or {"GCURUN_RANK": str(rank)}, binding=binding)


def drain(events, count_exits, timeout=20.0):
    """Events until ``count_exits`` ranks ended (exits or losses)."""
    got, ended = [], set()
    while len(ended) < count_exits:
        e = events.get(timeout=timeout)
        got.append(e)
        if isinstance(e, ExitEvent):
            ended.add(e.rank)
        elif isinstance(e, ExecutorErrorEvent):
            ended.update(e.ranks)
    return got


@pytest.fixture
def session():
    s = pipe_session()
    yield s
    s.channel.close()
    s.channel.proc.kill()
    s.channel.proc.wait(10)


def test_job_message_carries_env_secrets_and_binding(session):
    group = SSHRankGroup(session, [spec(0, "a", binding=Binding((2, 3), 1, True),
                                        env={"GCURUN_RANK": "0", "JOB": "j"}),
                                   spec(1, "b", env={"GCURUN_RANK": "1", "JOB": "j"})],
                         workdir="/w", secrets={"GCURUN_SECRET": "x"}, kill_grace=4.0)
    assert list(group.job_messages()) == [{
        "op": "job", "workdir": "/w", "kill_grace": 4.0, "secrets": {"GCURUN_SECRET": "x"},
        "env": {"JOB": "j"}, "more": False,
        "ranks": [{"rank": 0, "argv": ["a"], "env": {"GCURUN_RANK": "0"},
                   "binding": {"cpus": [2, 3], "numa_node": 1, "mem_bind": True}},
                  {"rank": 1, "argv": ["b"], "env": {"GCURUN_RANK": "1"}, "binding": None}]}]


def test_the_launchers_environment_reaches_the_ranks_under_their_own_variables(session):
    # Sent once, in the job message (never on a command line); the rank's own variables
    # and the secrets win over it, and it wins over the host's login environment.
    forwarded = {"PYTHONPATH": "/launcher/lib", "FWD_ONLY": "f", "JOB": "launcher",
                 "GCURUN_SECRET": "launcher", "HOME": "/launcher/home"}
    events = queue.Queue()
    group = SSHRankGroup(session, [spec(0, "sh", "-c",
                                        'echo "$PYTHONPATH $FWD_ONLY $JOB $GCURUN_SECRET"',
                                        env={"GCURUN_RANK": "0", "JOB": "rank"})],
                         workdir="/", secrets={"GCURUN_SECRET": "s"}, forwarded=forwarded)
    assert next(iter(group.job_messages()))["forwarded"] == forwarded
    group.start(events)
    got = drain(events, 1)
    assert OutputEvent(0, "stdout", b"/launcher/lib f rank s\n") in got
    assert got[-1] == ExitEvent(0, 0, None, None)


def test_a_large_job_travels_in_bounded_messages(session):
    from gcurun.launch.bootstrap_group import BATCH_RANKS

    ranks = [spec(r, "true", env={"GCURUN_RANK": str(r), "JOB": "j"}) for r in range(1100)]
    messages = list(SSHRankGroup(session, ranks, workdir="/w").job_messages())
    assert [m["op"] for m in messages] == ["job", "ranks", "ranks"]
    assert [len(m["ranks"]) for m in messages] == [BATCH_RANKS, BATCH_RANKS,
                                                   1100 - 2 * BATCH_RANKS]
    assert [m["more"] for m in messages] == [True, True, False]
    assert [r["rank"] for m in messages for r in m["ranks"]] == list(range(1100))


def test_output_then_exit_for_each_rank_and_the_session_closes(session):
    events = queue.Queue()
    group = SSHRankGroup(session, [spec(0, "sh", "-c", "echo out0; echo err0 >&2"),
                                   spec(1, "sh", "-c", "echo $GCURUN_SECRET; exit 4")],
                         workdir="/", secrets={"GCURUN_SECRET": "s"})
    group.start(events)
    got = drain(events, 2)
    for rank, exit_code in ((0, 0), (1, 4)):
        mine = [e for e in got if e.rank == rank]
        assert mine[-1] == ExitEvent(rank, exit_code, None, None)
        ends = [e for e in mine if isinstance(e, OutputEvent) and e.data == b""]
        assert {e.stream for e in ends} == {"stdout", "stderr"}
    assert OutputEvent(0, "stdout", b"out0\n") in got
    assert OutputEvent(0, "stderr", b"err0\n") in got
    assert OutputEvent(1, "stdout", b"s\n") in got
    assert set(group.pids()) == {0, 1}
    wait_for("the group to close its session", lambda: session.closed >= 1, 10)
    group.terminate(1.0)  # after the end: returns at once


def test_terminate_stops_running_ranks_with_sigterm(session):
    events = queue.Queue()
    group = SSHRankGroup(session, [spec(0, "sleep", "60"), spec(1, "sleep", "60")],
                         workdir="/")
    group.start(events)
    wait_for("both ranks to start", lambda: len(group.pids()) == 2, 10)
    group.terminate(2.0)
    exits = [e for e in drain(events, 2) if isinstance(e, ExitEvent)]
    assert sorted((e.rank, e.signal) for e in exits) == [(0, signal.SIGTERM),
                                                          (1, signal.SIGTERM)]


def test_terminate_before_start_closes_the_waiting_bootstrap(session):
    group = SSHRankGroup(session, [spec(0, "true")], workdir="/")
    group.terminate(1.0)
    assert session.closed == 1
    assert session.channel.proc.wait(10) == 0


def test_a_dead_bootstrap_loses_its_ranks_with_the_reason(session):
    events = queue.Queue()
    group = SSHRankGroup(session, [spec(0, "sleep", "60"), spec(1, "true")], workdir="/")
    group.start(events)
    wait_for("rank 0 to start", lambda: 0 in group.pids(), 10)
    wait_for("rank 1 to end", lambda: any(isinstance(e, ExitEvent) for e in
                                           list(events.queue)), 10)
    session.channel.proc.kill()
    lost = [e for e in drain(events, 2) if isinstance(e, ExecutorErrorEvent)]
    assert len(lost) == 1 and lost[0].ranks == (0,)
    assert lost[0].message.startswith(
        f"gcurun's bootstrap on nodeA ended (status {-signal.SIGKILL}) without reporting")


def test_a_bootstrap_that_answers_no_ping_is_given_up_and_its_ranks_lost(session):
    """A stopped bootstrap is as silent as a cut link: the launcher's pings go unanswered
    and the host is given up after the liveness timeout, saying so."""
    events = queue.Queue()
    group = SSHRankGroup(session, [spec(0, "sleep", "60")], workdir="/")
    group.keep_alive(1.0)
    group.start(events)
    wait_for("rank 0 to start", lambda: 0 in group.pids(), 10)
    os.kill(session.channel.proc.pid, signal.SIGSTOP)
    try:
        wait_for("the launcher to give the host up", lambda: session.closed >= 1, 30)
    finally:
        os.kill(session.channel.proc.pid, signal.SIGCONT)   # it finds its stdin closed
    lost = [e for e in drain(events, 1) if isinstance(e, ExecutorErrorEvent)]
    assert [(e.ranks, e.message) for e in lost] == [((0,), (
        "no word from nodeA for 1 s (--liveness-timeout): its link is cut, or it is down "
        "or stopped"))]
    assert session.channel.proc.wait(20) == 0


def test_pings_answered_keep_a_quiet_host(session):
    events = queue.Queue()
    # Quiet for twice the liveness timeout; a timeout of 2.5 s, not less, so that a
    # machine busy with other tests does not delay a ping's answer past it.
    group = SSHRankGroup(session, [spec(0, "sleep", "5")], workdir="/")
    group.keep_alive(2.5)
    group.start(events)
    got = drain(events, 1)
    assert [(e.rank, e.exit_code) for e in got if isinstance(e, ExitEvent)] == [(0, 0)]
    assert not [e for e in got if isinstance(e, ExecutorErrorEvent)]


def test_a_bootstrap_error_reaches_the_supervisor_as_the_root_cause(session, tmp_path):
    events = queue.Queue()
    group = SSHRankGroup(session, [spec(0, "true"), spec(1, "true")],
                         workdir=str(tmp_path / "missing"))
    group.start(events)
    with pytest.raises(RanksFailedError) as info:
        supervise([group], events, {0: "nodeA", 1: "nodeA"},
                  OutputSink(io.StringIO(), io.StringIO()), grace_seconds=1.0)
    failure = info.value.failure
    assert failure.exit_code == 255
    assert failure.error_text.startswith(
        f"cannot change to working directory '{tmp_path / 'missing'}' on ")
