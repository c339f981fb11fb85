"""TensorFlow/Keras elastic training: the callbacks and the error mapping alone, and a
Keras job on three local "hosts" that loses a worker mid-epoch and finishes on two."""

from __future__ import annotations

import json
import sys

import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed "
                         "(pip install tensorflow)")

from gcurun.errors import PeerFailureError  # noqa: E402
from gcurun.runtime.elastic import ObjectState  # noqa: E402
from gcurun.runtime.tensorflow.elastic import recoverable_error  # noqa: E402
from gcurun.runtime.tensorflow.keras import elastic  # noqa: E402
from tests.helpers import ROOT, run_gcurun  # noqa: E402

SCRIPT = str(ROOT / "tests" / "tensorflow" / "ranks" / "keras_elastic.py")


class Counting(ObjectState):
    def __init__(self, **values):
        super().__init__(bcast_object=lambda obj, root_rank=0, name=None: obj,
                         get_rank=lambda: 0, **values)
        self.commits = 0

    def commit(self) -> None:
        self.commits += 1
        super().commit()


def test_the_callbacks_keep_batch_and_epoch_and_commit_every_n_batches():
    state = Counting(batch=0, epoch=2)
    batch = elastic.UpdateBatchStateCallback(state)
    epoch = elastic.UpdateEpochStateCallback(state)
    commit = elastic.CommitStateCallback(state, batches_per_commit=3)
    epoch.on_train_begin()
    for b in range(7):
        batch.on_train_batch_end(b)
        commit.on_train_batch_end(b)
    assert state.batch == 7 and state.commits == 2
    batch.on_epoch_end(0)
    epoch.on_epoch_end(0)
    assert (state.batch, state.epoch) == (0, 3)     # fit's epoch 0 was the job's third
    with pytest.raises(ValueError, match="batches_per_commit=0"):
        elastic.CommitStateCallback(state, batches_per_commit=0)


def test_a_lost_peer_that_crossed_a_graph_op_is_recoverable_again():
    graph_error = tf.errors.UnknownError(None, None, "PeerFailureError: rank 2 (host h3) "
                                         "lost its connection\nTraceback ...")
    mapped = recoverable_error(graph_error)
    assert isinstance(mapped, PeerFailureError) and mapped.__cause__ is graph_error
    other = tf.errors.UnknownError(None, None, "ZeroDivisionError: division by zero")
    assert recoverable_error(other) is other
    assert recoverable_error(ValueError("x")).__class__ is ValueError


@pytest.mark.integration
@pytest.mark.tensorflow
def test_a_keras_job_that_loses_a_worker_mid_epoch_finishes_on_two_alike(tmp_path):
    done = run_gcurun("--min-np", "2", "-H", "localhost:1,127.0.0.1:1,127.0.0.2:1",
                      "--output-dir", str(tmp_path), sys.executable, SCRIPT, "3", "8",
                      "--kill", "2:1:3", timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    ends = [json.loads(line.partition("] ")[2]) for line in done.stdout.splitlines()
            if '"done": true' in line]
    assert sorted(e["rank"] for e in ends) == [0, 1]
    assert {e["size"] for e in ends} == {2} and {e["epoch"] for e in ends} == {3}
    assert len({e["hash"] for e in ends}) == 1
    assert "host 127.0.0.2 blacklisted" in done.stderr
