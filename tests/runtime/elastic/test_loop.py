"""The framework-neutral elastic loop with a fake reset: no processes, no launcher."""

from __future__ import annotations

from typing import Any

import pytest

from gcurun.errors import PeerFailureError
from gcurun.rendezvous.elastic import WorkerRemoved
from gcurun.runtime.api import MismatchError
from gcurun.runtime.elastic import loop, membership
from gcurun.runtime.elastic.state import HostsUpdatedInterrupt, ObjectState


class Recorder(ObjectState):
    """An ObjectState of one rank whose save/restore/sync are written down."""

    def __init__(self, calls: list[str], **values: Any):
        super().__init__(bcast_object=lambda obj, root_rank=0, name=None: obj,
                         get_rank=lambda: 0, **values)
        self.calls = calls

    def save(self) -> None:
        self.calls.append("save")
        super().save()

    def restore(self) -> None:
        self.calls.append("restore")
        super().restore()

    def sync(self) -> None:
        self.calls.append("sync")
        super().sync()


@pytest.fixture
def elastic(monkeypatch):
    """An elastic job whose generations say ``sync`` as the test sets it."""
    assignment = {"generation": 1, "sync": True}
    monkeypatch.setattr(loop, "elastic_job", lambda: True)
    monkeypatch.setattr(membership, "last_assignment", lambda: assignment)
    return assignment


def test_a_lost_peer_restores_the_commit_resets_and_runs_again(elastic):
    calls: list[str] = []
    state = Recorder(calls, step=0)
    state.register_reset_callbacks([lambda: calls.append("callback")])
    failures = [PeerFailureError("rank 2 died"), PeerFailureError("rank 1 died")]

    def train(state: Recorder) -> int:
        calls.append(f"train from {state.step}")
        state.step = 5
        if failures:
            raise failures.pop(0)
        return state.step

    wrapped = loop.run_fn(train, lambda: calls.append("reset"))
    assert wrapped(state) == 5
    assert calls == ["sync", "train from 0", "restore", "reset", "callback",
                     "sync", "train from 0", "restore", "reset", "callback",
                     "sync", "train from 0"]


def test_hosts_removed_keep_the_state_and_skip_the_sync_the_driver_skips(elastic):
    calls: list[str] = []
    state = Recorder(calls, step=0)
    interrupts = [HostsUpdatedInterrupt(skip_sync=True)]

    def train(state: Recorder) -> int:
        calls.append(f"train from {state.step}")
        state.step += 3
        if interrupts:
            elastic["sync"] = False      # the next generation only lost hosts
            raise interrupts.pop(0)
        return state.step

    assert loop.run_fn(train, lambda: calls.append("reset"))(state) == 6
    assert calls == ["sync", "train from 0", "reset", "train from 3"]


def test_the_driver_decides_a_sync_even_when_the_script_asked_to_skip_it(elastic):
    calls: list[str] = []
    state = Recorder(calls, step=0)
    interrupts = [HostsUpdatedInterrupt(skip_sync=True)]

    def train(state: Recorder) -> None:
        calls.append("train")
        if interrupts:
            raise interrupts.pop(0)   # elastic["sync"] stays True: hosts were added

    loop.run_fn(train, lambda: calls.append("reset"))(state)
    assert calls == ["sync", "train", "reset", "sync", "train"]


def test_a_program_error_ends_the_worker_without_a_reset(elastic):
    calls: list[str] = []

    def train(state: Recorder) -> None:
        raise MismatchError("tensor 'grad' has shape (3,) on rank 0 but (4,) on rank 1")

    with pytest.raises(MismatchError):
        loop.run_fn(train, lambda: calls.append("reset"))(Recorder(calls))
    assert "reset" not in calls and "restore" not in calls


def test_a_generation_that_fails_to_form_is_joined_again(elastic):
    calls: list[str] = []
    resets = [PeerFailureError("rank 1 died while forming"), None]
    runs = [PeerFailureError("rank 2 died")]

    def reset() -> None:
        calls.append("reset")
        failure = resets.pop(0)
        if failure is not None:
            raise failure

    def train(state: Recorder) -> str:
        if runs:
            raise runs.pop(0)
        return "done"

    assert loop.run_fn(train, reset)(Recorder(calls)) == "done"
    assert calls.count("reset") == 2 and calls.count("restore") == 1


def test_a_removed_worker_leaves_with_status_zero(elastic, capsys):
    def train(state: Recorder) -> None:
        raise PeerFailureError("rank 0 died")

    def reset() -> None:
        raise WorkerRemoved("worker 3 (host h3) is no longer part of the job: its slot "
                            "is no longer part of the job")

    with pytest.raises(SystemExit) as exit_info:
        loop.run_fn(train, reset)(Recorder([]))
    assert exit_info.value.code == 0
    assert "worker 3 (host h3) is no longer part of the job" in capsys.readouterr().err


def test_outside_an_elastic_job_the_state_syncs_once_and_the_function_runs_once(
        monkeypatch):
    monkeypatch.setattr(loop, "elastic_job", lambda: False)
    calls: list[str] = []

    def train(state: Recorder) -> None:
        calls.append("train")
        raise PeerFailureError("rank 1 died")

    with pytest.raises(PeerFailureError):
        loop.run_fn(train, lambda: calls.append("reset"))(Recorder(calls))
    assert calls == ["sync", "train"]
