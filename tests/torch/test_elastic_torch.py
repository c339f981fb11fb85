"""PyTorch elastic training: TorchState/ElasticSampler units, and the example run on
three local "hosts" with one worker killed mid-epoch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.helpers import ROOT, gcurun_cmd

torch = pytest.importorskip("torch")

import gcurun.runtime.torch as hvd  # noqa: E402

EXAMPLE = str(ROOT / "examples" / "pytorch_elastic_train.py")


@pytest.fixture
def one_rank():
    hvd.init()
    yield
    hvd.shutdown()


@pytest.mark.parametrize("length, size, rank, processed, expected", [
    (10, 1, 0, 0, list(range(10))),
    (10, 3, 0, 0, [0, 3, 6, 9]),
    (10, 3, 2, 0, [2, 5, 8, 1]),        # padded with the head up to 12
    (10, 2, 1, 6, [7, 9]),
])
def test_elastic_sampler_partitions_what_is_left(monkeypatch, length, size, rank,
                                                 processed, expected):
    from gcurun.runtime.torch import basics
    from gcurun.runtime.torch.elastic import ElasticSampler

    monkeypatch.setattr(basics, "size", lambda: size)
    monkeypatch.setattr(basics, "rank", lambda: rank)
    sampler = ElasticSampler(list(range(length)), shuffle=False)
    sampler.load_state_dict({"epoch": 0, "processed_num": processed})
    assert list(sampler) == expected
    assert len(sampler) == len(expected)


def test_elastic_sampler_shuffles_per_epoch_and_counts_batches(monkeypatch):
    from gcurun.runtime.torch import basics
    from gcurun.runtime.torch.elastic import ElasticSampler

    monkeypatch.setattr(basics, "size", lambda: 2)
    monkeypatch.setattr(basics, "rank", lambda: 0)
    sampler = ElasticSampler(list(range(100)), shuffle=True, seed=3)
    first = list(sampler)
    sampler.set_epoch(1)
    assert len(first) == len(set(first)) == 50 and first != list(range(0, 100, 2))
    assert list(sampler) != first
    sampler.record_batch(0, 10)
    assert sampler.state_dict() == {"epoch": 1, "processed_num": 20}


def test_torch_state_saves_restores_and_replaces_handled_values(one_rank):
    from gcurun.runtime.torch.elastic import TorchState

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = TorchState(model=model, optimizer=optimizer, epoch=3, items=[1])
    state.commit()
    with torch.no_grad():
        model.weight.fill_(7.0)
    state.epoch = 9
    state.restore()
    assert state.epoch == 3 and not torch.all(model.weight == 7.0)
    other = torch.nn.Linear(2, 1)
    with torch.no_grad():
        other.weight.fill_(5.0)
    state.model = other                   # a handled name: replaced and saved at once
    with torch.no_grad():
        other.weight.fill_(1.0)
    state.restore()
    assert torch.all(other.weight == 5.0) and state.model is other
    state.sync()                          # one rank: its own values
    assert state.items == [1]


def test_torch_state_reset_rearms_its_distributed_optimizers_only(one_rank, monkeypatch):
    from gcurun.runtime.torch.elastic import TorchState
    from gcurun.runtime.torch.optimizer import is_distributed

    model = torch.nn.Linear(2, 1)
    plain = torch.optim.SGD(model.parameters(), lr=0.1)
    distributed = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                           named_parameters=model.named_parameters())
    assert is_distributed(distributed) and not is_distributed(plain)
    state = TorchState(model=model, optimizer=distributed, other=plain)
    rearmed = []
    monkeypatch.setattr(type(distributed), "rearm", lambda self: rearmed.append(self))
    state.reset()
    assert rearmed == [distributed]


def test_a_rearmed_optimizer_steps_as_before(one_rank):
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                         named_parameters=model.named_parameters())
    model(torch.tensor([[1.0, 2.0]])).sum().backward()
    optimizer.rearm()                     # one rank: it still does not communicate
    optimizer.step()
    assert model.weight.tolist() == [[0.5, 0.0]]


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _worker_pid(root: int, worker: int) -> int | None:
    for pid in _descendants(root):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"GCURUN_ELASTIC_WORKER={worker}".encode() in env:
            return pid
    return None


@pytest.mark.integration
@pytest.mark.torch
def test_example_survives_a_killed_worker_with_equal_parameters(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        gcurun_cmd("--min-np", "2", "-H", "localhost:1,127.0.0.1:1,127.0.0.2:1",
                   "--output-dir", str(tmp_path), sys.executable, EXAMPLE, "--epochs", "2",
                   "--samples", "768", "--json-log", "--step-sleep", "0.02"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    records, killed = [], False
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            _, _, body = line.partition("] ")
            if not body.startswith("{"):
                continue
            record = json.loads(body)
            records.append(record)
            if not killed and record.get("batch", -1) >= 4:
                pid = _worker_pid(proc.pid, 2)
                assert pid is not None
                os.kill(pid, signal.SIGKILL)
                killed = True
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    done = [r for r in records if r.get("done")]
    assert sorted(r["rank"] for r in done) == [0, 1]
    assert {r["size"] for r in done} == {2} and {r["generation"] for r in done} == {2}
    assert len({r["hash"] for r in done}) == 1
    resets = [r for r in records if r.get("reset")]
    assert {(r["size"], r["generation"]) for r in resets} == {(2, 2)}
    steps = [(r["epoch"], r["batch"]) for r in records if "batch" in r]
    # epoch 1 ran on 2 ranks: 768 samples / (32 x 2) = 12 batches
    assert steps[-1] == (1, 11)
    assert [b for e, b in steps if e == 1] == list(range(12))
