"""Elastic training for Keras (Horovod's ``horovod.tensorflow.keras.elastic``):
``hvd.elastic.KerasState`` and the callbacks that keep it current during ``model.fit``,
with TensorFlow's ``run`` and state classes.

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    @hvd.elastic.run
    def train(state):
        model.fit(dataset, steps_per_epoch=500 // hvd.size(), epochs=5 - state.epoch,
                  callbacks=[hvd.elastic.UpdateBatchStateCallback(state),
                             hvd.elastic.UpdateEpochStateCallback(state),
                             hvd.elastic.CommitStateCallback(state)])
"""

from __future__ import annotations

from typing import Any

from gcurun.runtime.tensorflow.elastic import (
    HostsUpdatedInterrupt,
    HostUpdateResult,
    ObjectState,
    RendezvousLost,
    State,
    TensorFlowKerasState,
    TensorFlowState,
    WorkerRemoved,
    recoverable_error,
    run,
)
from gcurun.runtime.tensorflow.keras._which import Callback


class KerasState(TensorFlowKerasState):
    """A Keras model's and optimizer's variables and plain values (``epoch``, ``batch``)."""

    def __init__(self, model: Any, optimizer: Any = None, **kwargs: Any):
        super().__init__(model, optimizer=optimizer, **kwargs)


class CommitStateCallback(Callback):
    """Commits ``state`` every ``batches_per_commit`` batches (a commit also checks for
    added or removed hosts: every rank must pass the same batches)."""

    def __init__(self, state: State, batches_per_commit: int = 1):
        super().__init__()
        if batches_per_commit < 1:
            raise ValueError(f"batches_per_commit={batches_per_commit}: commit every 1 "
                             "or more batches")
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit


class UpdateBatchStateCallback(Callback):
    """Keeps ``state.batch`` at the number of batches done in the current epoch (0 when
    an epoch ends). Keras 3 cannot shorten an epoch once ``fit`` runs, so after a reset
    the interrupted epoch runs all its steps again from the restored weights (Horovod's
    version shortened it under TF2's Keras)."""

    def __init__(self, state: Any):
        super().__init__()
        self.state = state

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.state.batch = batch + 1

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.batch = 0


class UpdateEpochStateCallback(Callback):
    """Keeps ``state.epoch`` at the next epoch to run when one ends."""

    def __init__(self, state: Any):
        super().__init__()
        self.state = state
        self._first = 0

    def on_train_begin(self, logs: Any = None) -> None:
        self._first = self.state.epoch

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.epoch = self._first + epoch + 1


__all__ = ["CommitStateCallback", "HostUpdateResult", "HostsUpdatedInterrupt", "KerasState",
           "ObjectState", "RendezvousLost", "State", "TensorFlowKerasState",
           "TensorFlowState", "UpdateBatchStateCallback", "UpdateEpochStateCallback",
           "WorkerRemoved", "recoverable_error", "run"]
