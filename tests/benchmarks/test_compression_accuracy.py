"""benchmarks/compression_accuracy.py: its task, batches and report without ranks, and (in
-m long) a tiny run on 2 ranks under gcurun in which fp16 changes what is learned.
Accuracy is reported, never asserted."""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks.compression_accuracy import (
    CLASSES,
    INPUTS,
    Outcome,
    batches,
    largest_difference,
    parse_args,
    report,
    teacher_task,
)
from tests.helpers import run_gcurun

torch = pytest.importorskip("torch")


def test_the_task_is_the_same_for_the_same_seed_and_uses_every_class():
    task = teacher_task(3, 512, 128)
    assert task.x_train.shape == (512, INPUTS) and task.x_test.shape == (128, INPUTS)
    assert set(task.y_train.tolist()) == set(range(CLASSES))
    again = teacher_task(3, 512, 128)
    assert torch.equal(task.x_train, again.x_train) and torch.equal(task.y_test, again.y_test)
    assert not torch.equal(task.y_train, teacher_task(4, 512, 128).y_train)


def test_batches_go_through_every_sample_once_an_epoch_the_same_for_both_runs():
    steps = batches(0, train=40, global_batch=8, steps=7)
    assert [len(b) for b in steps] == [8] * 7
    assert sorted(torch.cat(steps[:5]).tolist()) == list(range(40))
    assert all(torch.equal(a, b) for a, b in zip(steps, batches(0, 40, 8, 7), strict=True))


def test_largest_difference_names_the_parameter():
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        b.bias[1] += 0.25
    diff, name, scale = largest_difference(a, b)
    assert (round(diff, 6), name) == (0.25, "bias")
    assert scale == pytest.approx(max(a.weight.abs().max(), a.bias.abs().max()).item())


def test_the_report_gives_loss_accuracy_and_the_difference():
    args = parse_args(["--steps", "5", "--train", "64", "--test", "32"])
    text = report([Outcome("none", 0.51234, 0.875), Outcome("fp16", 0.51239, 0.84375)],
                  (1.5e-5, "2.weight", 0.0812), 2, 8_400_000, args)
    lines = text.splitlines()
    assert lines[0].startswith("# compression accuracy: the MLP (8.4 M parameters, 10 "
                               "classes), 2 rank(s), 5 steps of 64 samples per rank")
    assert lines[2:6] == ["| compression | final training loss | held-out accuracy |",
                          "| --- | --- | --- |",
                          "| none | 0.5123 | 0.8750 |",
                          "| fp16 | 0.5124 | 0.8438 |"]
    assert lines[-1] == ("# largest parameter difference, none vs fp16: 1.5e-05 (in "
                         "2.weight; the largest parameter is 0.0812)")


def test_options_must_be_positive():
    with pytest.raises(SystemExit):
        parse_args(["--steps", "0"])


@pytest.mark.long        # two ranks importing torch: 25 s on a busy 2-core machine
@pytest.mark.integration
@pytest.mark.torch
def test_on_two_ranks_fp16_changes_the_parameters(tmp_path):
    out = tmp_path / "result.json"
    done = run_gcurun("-np", "2", sys.executable, "benchmarks/compression_accuracy.py",
                      "--steps", "2", "--batch-size", "8", "--train", "64", "--test", "32",
                      "--json", str(out), timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| fp16 |" in done.stdout
    result = json.loads(out.read_text())
    assert result["size"] == 2
    assert [o["compression"] for o in result["outcomes"]] == ["none", "fp16"]
    assert all(0 <= o["test_accuracy"] <= 1 and o["train_loss"] > 0
               for o in result["outcomes"])
    # Two ranks send their gradients, rounded to float16 in the second run: the runs part.
    assert result["largest_difference"]["value"] > 0
