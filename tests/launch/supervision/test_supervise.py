"""The supervisor driven by fake rank groups: no processes."""

from __future__ import annotations

import io
import queue
import signal

import pytest

from gcurun.errors import JobInterrupted, RanksFailedError
from gcurun.launch.api import ExecutorErrorEvent, ExitEvent, OutputEvent
from gcurun.launch.supervision.output import OutputSink
from gcurun.launch.supervision.supervise import EventQueue, InterruptEvent, supervise


class FakeGroup:
    """Records terminate calls; on terminate, reports the given ranks killed by SIGTERM."""

    def __init__(self, events, ranks_killed=()):
        self.events = events
        self.ranks_killed = ranks_killed
        self.terminated = []

    def start(self, events):
        pass

    def terminate(self, grace_seconds):
        first = not self.terminated
        self.terminated.append(grace_seconds)
        if first:
            for r in self.ranks_killed:
                self.events.put(ExitEvent(r, None, signal.SIGTERM))
        self.ranks_killed = ()

    def pids(self):
        return {}


def run(events, group, hosts, grace=1.0):
    out, err = io.StringIO(), io.StringIO()
    sink = OutputSink(out, err)
    supervise([group], events, hosts, sink, grace_seconds=grace)
    return out.getvalue(), err.getvalue()


def test_success_writes_output_and_cleans_up():
    events = queue.Queue()
    group = FakeGroup(events)
    for e in (OutputEvent(0, "stdout", b"hi\n"), ExitEvent(0, 0), ExitEvent(1, 0)):
        events.put(e)
    out, _ = run(events, group, {0: "a", 1: "a"})
    assert out == "[0] hi\n"
    assert group.terminated == [1.0]  # leftovers of the job are stopped at the end


def test_first_failure_is_root_cause_and_stops_everyone():
    events = queue.Queue()
    group = FakeGroup(events, ranks_killed=[0, 2])
    events.put(OutputEvent(1, "stderr", b"Traceback\nValueError: bad\n"))
    events.put(ExitEvent(1, 3))
    with pytest.raises(RanksFailedError) as err:
        run(events, group, {0: "a", 1: "a", 2: "b"})
    f = err.value.failure
    assert (f.rank, f.host, f.exit_code, f.stderr_tail) == (1, "a", 3, ("Traceback",
                                                                      "ValueError: bad"))
    assert err.value.exit_code == 3
    assert len(err.value.others) == 2


def test_signal_death_maps_to_128_plus_n():
    events = queue.Queue()
    events.put(ExitEvent(0, None, signal.SIGKILL))
    with pytest.raises(RanksFailedError) as err:
        run(events, FakeGroup(events), {0: "a"})
    assert err.value.exit_code == 137
    assert str(err.value) == "rank 0 on a was killed by SIGKILL"


def test_interrupt_stops_all_and_reports_signal():
    events = queue.Queue()
    group = FakeGroup(events, ranks_killed=[0, 1])
    events.put(InterruptEvent(signal.SIGINT, "SIGINT"))
    with pytest.raises(JobInterrupted) as err:
        run(events, group, {0: "a", 1: "a"})
    assert err.value.exit_code == 130


def test_lost_ranks_fail_the_job():
    events = queue.Queue()
    group = FakeGroup(events, ranks_killed=[0])
    events.put(ExecutorErrorEvent((1,), "connection to b dropped"))
    with pytest.raises(RanksFailedError) as err:
        run(events, group, {0: "a", 1: "b"})
    assert err.value.failure.error_text == "connection to b dropped"
    assert err.value.exit_code == 255


def test_ranks_that_never_report_are_declared_lost(monkeypatch):
    import gcurun.launch.supervision.supervise as sv

    monkeypatch.setattr(sv, "EXIT_REPORT_SLACK", 0.2)
    events = queue.Queue()
    events.put(ExitEvent(0, 1))
    with pytest.raises(RanksFailedError) as err:
        run(events, FakeGroup(events), {0: "a", 1: "b"}, grace=0.1)
    assert err.value.failure.rank == 0
    assert [o.rank for o in err.value.others] == [1]


def test_second_interrupt_skips_the_grace_period():
    events = queue.Queue()

    class Stubborn(FakeGroup):
        def terminate(self, grace_seconds):
            self.terminated.append(grace_seconds)
            if grace_seconds == 0:  # only SIGKILL ends these ranks
                self.events.put(ExitEvent(0, None, signal.SIGKILL))

    group = Stubborn(events)
    events.put(InterruptEvent(signal.SIGINT, "SIGINT"))
    events.put(InterruptEvent(signal.SIGINT, "SIGINT"))
    with pytest.raises(JobInterrupted):
        run(events, group, {0: "a"}, grace=30.0)
    assert 30.0 in group.terminated and 0 in group.terminated


def test_the_event_queue_holds_a_bounded_amount_of_output():
    import threading

    events = EventQueue(output_limit=10)
    events.put(OutputEvent(0, "stdout", b"x" * 8))
    events.put(OutputEvent(0, "stdout", b""))           # the end of a stream: no bytes
    put = threading.Event()

    def reader() -> None:
        events.put(OutputEvent(1, "stdout", b"y" * 8))   # would hold 16 > 10 bytes
        put.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    events.put(ExitEvent(0, 0))                          # other events never wait
    events.put(InterruptEvent(signal.SIGTERM, "SIGTERM"))
    assert not put.wait(0.5)
    assert events.get_nowait().data == b"x" * 8
    assert put.wait(10)
    t.join(10)
    events.unbound()
    events.put(OutputEvent(2, "stdout", b"z" * 100))     # unbound: nothing waits
    assert [type(events.get_nowait()).__name__ for _ in range(5)] == [
        "OutputEvent", "ExitEvent", "InterruptEvent", "OutputEvent", "OutputEvent"]


def test_an_output_event_larger_than_the_limit_passes_an_empty_queue():
    events = EventQueue(output_limit=10)
    events.put(OutputEvent(0, "stdout", b"x" * 100))
    assert events.get_nowait().data == b"x" * 100
