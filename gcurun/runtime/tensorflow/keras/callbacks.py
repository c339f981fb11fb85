"""Horovod's Keras callbacks for ``model.fit``: BroadcastGlobalVariablesCallback,
MetricAverageCallback, LearningRateScheduleCallback, LearningRateWarmupCallback,
BestModelCheckpoint."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import gcurun.runtime as runtime
from gcurun.runtime.tensorflow.functions import broadcast_variables
from gcurun.runtime.tensorflow.keras._which import Callback, ModelCheckpoint
from gcurun.runtime.tensorflow.process_sets import global_process_set

log = logging.getLogger("gcurun.runtime.tensorflow.keras")


def no_jit(model: Any) -> None:
    """Turn XLA off for ``model``'s train function: XLA cannot compile the collectives,
    which are Python ops. The train function is rebuilt if it was built with XLA."""
    if getattr(model, "jit_compile", False):
        model.jit_compile = False
        if getattr(model, "train_function", None) is not None:
            model.make_train_function(force=True)


def optimizer_variables(optimizer: Any) -> list[Any]:
    if optimizer is None:
        return []
    found = optimizer.variables
    return list(found() if callable(found) else found)


def unbuilt(optimizer: Any) -> bool:
    """Whether ``optimizer`` can and must be built before its variables are broadcast:
    Keras 3's and Keras 2's optimizers build their slots at ``build``; Keras 2's legacy
    ones (no ``build``) make them, as zeros on every rank, at their first step."""
    if hasattr(optimizer, "built"):
        return not optimizer.built
    return hasattr(optimizer, "build") and not getattr(optimizer, "_built", False)


class BroadcastGlobalVariablesCallback(Callback):
    """Gives every rank ``root_rank``'s model and optimizer variables when training
    begins, so that the first step starts from the same weights and optimizer state (a
    model restored on the root alone spreads so). An optimizer not built yet is built
    for the model's weights first; when a model's weights do not exist yet (a subclassed
    model, built by its first call), everything is broadcast after the first batch
    instead. Also turns the model's ``jit_compile`` off (XLA cannot compile the
    collectives)."""

    def __init__(self, root_rank: int, device: str = "",
                 process_set: Any = global_process_set):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.process_set = process_set
        self.broadcast_done = False

    def _variables(self) -> list[Any]:
        return list(self.model.variables) + optimizer_variables(self.model.optimizer)

    def on_train_begin(self, logs: Any = None) -> None:
        no_jit(self.model)
        optimizer = self.model.optimizer
        if optimizer is not None and unbuilt(optimizer) and self.model.trainable_variables:
            optimizer.build(self.model.trainable_variables)
        variables = self._variables()
        counts = runtime.allgather_object(len(variables), name="gcurun.broadcast_callback")
        if len(set(counts)) == 1 and variables:
            broadcast_variables(variables, self.root_rank, self.process_set)
            self.broadcast_done = True

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if not self.broadcast_done:
            broadcast_variables(self._variables(), self.root_rank, self.process_set)
            self.broadcast_done = True


class MetricAverageCallback(Callback):
    """Averages the epoch's metrics (``logs``) over the ranks at the end of each epoch,
    so that later callbacks (checkpoints, learning-rate plateaus) and rank 0's report
    see the values of the whole job. Put it before those callbacks."""

    def __init__(self, device: str = "", process_set: Any = global_process_set):
        super().__init__()
        self.device = device
        self.process_set = process_set

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if not logs:
            return
        names = sorted(logs)
        values = [np.asarray(float(logs[name]), np.float64).reshape(1) for name in names]
        every = runtime.allgather_object(names, name="gcurun.metric_average.names")
        if any(other != names for other in every):
            raise ValueError(f"MetricAverageCallback: the ranks report different metrics "
                             f"({', '.join(f'rank {r}: {n}' for r, n in enumerate(every))})")
        averaged = runtime.grouped_allreduce(values, name="gcurun.metric_average",
                                             op=runtime.Average)
        for name, value in zip(names, averaged, strict=True):
            logs[name] = float(value[0])


class LearningRateScheduleCallback(Callback):
    """Sets the learning rate to ``initial_lr * multiplier(epoch)`` from ``start_epoch``
    until ``end_epoch``: at each epoch's first batch (``staircase``), else at every batch
    with a fractional epoch. ``multiplier`` is a number or a function of the epoch.
    Keras 3 optimizers keep momentum as a constant of the compiled step, so
    ``momentum_correction`` cannot rescale it (a warning says so when it would)."""

    def __init__(self, initial_lr: float | None, multiplier: float | Callable[[float], float],
                 start_epoch: int = 0, end_epoch: int | None = None, staircase: bool = True,
                 momentum_correction: bool = True, steps_per_epoch: int | None = None):
        super().__init__()
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = 0
        if callable(multiplier):
            self.staircase = staircase
            self.multiplier: Callable[[float], float] = multiplier
        else:
            self.staircase = True
            self.multiplier = lambda _epoch: float(multiplier)   # type: ignore[arg-type]

    def _learning_rate(self) -> Any:
        rate = self.model.optimizer.learning_rate
        if not hasattr(rate, "assign"):
            raise ValueError(f"{type(self).__name__}: the optimizer's learning rate is a "
                             f"schedule ({type(rate).__name__}), which this callback would "
                             "override; give the optimizer a number")
        return rate

    def on_train_begin(self, logs: Any = None) -> None:
        if self.initial_lr is None:
            self.initial_lr = float(np.asarray(self._learning_rate()))
        if not self.staircase and not self.steps_per_epoch:
            steps = (self.params or {}).get("steps")
            if not steps:
                raise ValueError(f"{type(self).__name__}: cannot tell the number of steps "
                                 "per epoch; pass steps_per_epoch=")
            self.steps_per_epoch = int(steps)
        momentum = getattr(self.model.optimizer, "momentum", 0.0)
        if self.momentum_correction and isinstance(momentum, float) and momentum > 0:
            warnings.warn(f"{type(self).__name__}: momentum_correction has no effect on "
                          "Keras 3 optimizers (momentum is a constant of the compiled train "
                          "step); pass momentum_correction=False to silence this",
                          stacklevel=2)

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.current_epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.current_epoch < self.start_epoch or (
                self.end_epoch is not None and self.current_epoch >= self.end_epoch):
            return
        if self.staircase:
            if batch == 0:
                self._set(self.current_epoch)
        else:
            assert self.steps_per_epoch
            self._set(self.current_epoch + batch / self.steps_per_epoch)

    def _set(self, epoch: float) -> None:
        assert self.initial_lr is not None
        self._learning_rate().assign(self.initial_lr * self.multiplier(epoch))

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if logs is not None:
            logs["learning_rate"] = float(np.asarray(self._learning_rate()))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Raises the learning rate from ``initial_lr / size()`` to ``initial_lr`` over the
    first ``warmup_epochs`` epochs, batch by batch (Goyal et al., "Accurate, Large
    Minibatch SGD"): give the optimizer the rate scaled by the number of ranks and let
    this callback start it low."""

    def __init__(self, initial_lr: float | None, warmup_epochs: int = 5,
                 momentum_correction: bool = True, steps_per_epoch: int | None = None,
                 verbose: int = 0):
        def multiplier(epoch: float) -> float:
            # Round numbers at the end of each epoch, as Horovod's.
            epoch += 1.0 / (self.steps_per_epoch or 1)
            size = runtime.size()
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        super().on_epoch_end(epoch, logs)
        if self.end_epoch is not None and epoch == self.end_epoch - 1 and self.verbose:
            log.info("epoch %d: finished the gradual learning rate warmup to %g", epoch + 1,
                     float(np.asarray(self._learning_rate())))


class BestModelCheckpoint(ModelCheckpoint):
    """ModelCheckpoint that keeps only the best model, written by rank 0 alone."""

    def __init__(self, filepath: str, monitor: str = "val_loss", verbose: int = 0,
                 mode: str = "auto", save_freq: Any = "epoch"):
        super().__init__(filepath=filepath, monitor=monitor, verbose=verbose,
                         save_best_only=True, save_weights_only=False, mode=mode,
                         save_freq=save_freq)

    def _save_model(self, *args: Any, **kwargs: Any) -> Any:
        if runtime.rank() == 0:
            return super()._save_model(*args, **kwargs)
        return None
