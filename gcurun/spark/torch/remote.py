"""The torch Estimator's function on every rank: read this rank's shard of the
materialised data, train with ``gcurun.runtime.torch``'s DistributedOptimizer from rank 0's
weights (or the run's last checkpoint), checkpoint after each epoch (rank 0), and return
the history, the trained state (rank 0) and a digest of this rank's weights."""

from __future__ import annotations

import dataclasses
import functools
import io
import sys
from typing import Any

from gcurun.spark.common import training, util
from gcurun.spark.common.training import Checkpoint, TrainSpec

SUFFIX = "pt"


@dataclasses.dataclass(frozen=True)
class TorchSpec:
    """The torch parts of a run: losses and their weights, metrics, shapes, compression."""

    losses: tuple[Any, ...]
    loss_weights: tuple[float, ...]
    metrics: tuple[Any, ...]
    input_shapes: tuple[Any, ...] | None
    label_shapes: tuple[Any, ...] | None
    compression: Any
    backward_passes_per_step: int
    train_minibatch_fn: Any


def save_state(model: Any, optimizer: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
    return buffer.getvalue()


def load_state(data: bytes) -> dict[str, Any]:
    import torch

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)  # type: ignore[no-any-return]


def weights_digest(model: Any) -> str:
    return training.digest(t.detach().cpu().numpy() for _, t in
                           sorted(model.state_dict().items()))


def train(spec: TrainSpec, torch_spec: TorchSpec, model: Any, optimizer: Any,
          resume: bytes | None, resume_epochs: int,
          resume_history: dict[str, list[float]]) -> dict[str, Any]:
    """Train on this rank; see the module's docstring for what it returns."""
    import torch

    import gcurun.runtime.torch as hvd

    hvd.init()
    if spec.seed is not None:
        torch.manual_seed(spec.seed)
    if resume is not None:
        state = load_state(resume)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    kwargs: dict[str, Any] = {"named_parameters": model.named_parameters(),
                              "backward_passes_per_step": torch_spec.backward_passes_per_step}
    if torch_spec.compression is not None:
        kwargs["compression"] = torch_spec.compression
    distributed = hvd.DistributedOptimizer(optimizer, **kwargs)
    rank, size = hvd.rank(), hvd.size()
    shard = util.read_shard(spec.store, spec.train_path, rank, size, spec.columns)
    val_shard = util.read_shard(spec.store, spec.val_path, rank, size, spec.columns) \
        if spec.val_path else None
    history = {k: list(v) for k, v in resume_history.items()}
    for epoch in range(resume_epochs, spec.epochs):
        model.train()
        seed = (spec.seed or 0) * 1_000_003 + epoch * size + rank
        batches = util.epoch_batches(shard, spec.steps_per_epoch, spec.batch_size,
                                     spec.shuffle, seed)
        sums = _run_batches(spec, torch_spec, model, distributed, batches, train=True)
        values = _averaged(hvd, sums, "")
        if val_shard is not None:
            model.eval()
            with torch.no_grad():
                val_batches = _val_batches(spec, val_shard)
                values.update(_averaged(hvd, _run_batches(
                    spec, torch_spec, model, None, val_batches, train=False), "val_"))
        training.append_history(history, values)
        if rank == 0:
            if spec.verbose:
                shown = ", ".join(f"{k}={v:.4f}" for k, v in values.items())
                sys.stdout.write(f"epoch {epoch + 1}/{spec.epochs}: {shown}\n")
                sys.stdout.flush()
            if spec.store.saving_runs():
                training.save_checkpoint(spec.store, spec.run_id, SUFFIX, Checkpoint(
                    save_state(model, optimizer), epoch + 1, history))
    return {"history": history, "digest": weights_digest(model),
            "state": save_state(model, optimizer) if rank == 0 else None}


def _val_batches(spec: TrainSpec, shard: dict[str, Any]) -> Any:
    rows = len(next(iter(shard.values())))
    steps = -(-rows // spec.val_batch_size)
    if spec.validation_steps is not None:
        steps = min(steps, spec.validation_steps)
    for step in range(steps):
        part = slice(step * spec.val_batch_size, (step + 1) * spec.val_batch_size)
        yield {name: values[part] for name, values in shard.items()}


def _run_batches(spec: TrainSpec, torch_spec: TorchSpec, model: Any, optimizer: Any,
                 batches: Any, train: bool) -> dict[str, float]:
    """Sums over the batches of each value times the batch's rows, and the rows."""
    sums: dict[str, float] = {"__rows": 0.0}
    for batch in batches:
        rows = len(batch[spec.label_cols[0]])
        if rows == 0:
            continue
        inputs = _inputs(spec, torch_spec, batch)
        labels = [_tensor(batch[c], spec.metadata[c].is_integral) for c in spec.label_cols]
        weights = _tensor(batch[spec.sample_weight_col], False) \
            if spec.sample_weight_col else None
        if train and torch_spec.train_minibatch_fn is not None:
            transform = functools.partial(_transform_outputs, torch_spec=torch_spec)
            outputs, loss = torch_spec.train_minibatch_fn(
                model, optimizer, transform, _loss_fn(spec, torch_spec, weights),
                inputs, labels, weights)
        else:
            if train:
                optimizer.zero_grad()
            outputs, labels = _transform_outputs(model(*inputs), labels, torch_spec)
            loss = _loss_fn(spec, torch_spec, weights)(outputs, labels)
            if train:
                loss.backward()
                optimizer.step()
        outputs, labels = _transform_outputs(outputs, labels, torch_spec)
        sums["loss"] = sums.get("loss", 0.0) + float(loss.detach()) * rows
        for fn in torch_spec.metrics:
            for label, output, target in zip(spec.label_cols, outputs, labels, strict=False):
                name = training.metric_name(fn, label, spec.label_cols)
                sums[name] = sums.get(name, 0.0) + float(fn(output.detach(), target)) * rows
        sums["__rows"] += rows
    return sums


def _averaged(hvd: Any, sums: dict[str, float], prefix: str) -> dict[str, float]:
    """The job's mean of each value: every rank reduces the same names in the same order."""
    import torch

    names = sorted(sums)
    totals = hvd.allreduce(torch.tensor([sums[n] for n in names], dtype=torch.float64),
                           op=hvd.Sum, name=f"{prefix}epoch_metrics")
    rows = float(totals[names.index("__rows")])
    return {prefix + n: float(totals[i]) / max(rows, 1.0) for i, n in enumerate(names)
            if n != "__rows"}


def _tensor(values: Any, integral: bool) -> Any:
    import numpy as np
    import torch

    return torch.from_numpy(np.array(values, dtype=np.int64 if integral else np.float32))


def _inputs(spec: TrainSpec, torch_spec: TorchSpec, batch: dict[str, Any]) -> list[Any]:
    shapes = torch_spec.input_shapes or [None] * len(spec.feature_cols)
    inputs = []
    for name, shape in zip(spec.feature_cols, shapes, strict=False):
        value = _tensor(batch[name], False)
        inputs.append(value.reshape(shape) if shape else value.reshape(len(value), -1))
    return inputs


def _transform_outputs(outputs: Any, labels: list[Any], torch_spec: TorchSpec) -> Any:
    """Horovod's rule: labels reshaped to ``label_shapes``, or else to the output's shape
    when they hold as many values (and then of the output's float type)."""
    if not isinstance(outputs, (list, tuple)):
        outputs = [outputs]
    if torch_spec.label_shapes:
        labels = [label.reshape(shape) for label, shape
                  in zip(labels, torch_spec.label_shapes, strict=False)]
    else:
        labels = [label.reshape(out.shape).to(out.dtype)
                  if out.shape.numel() == label.shape.numel() else label
                  for out, label in zip(outputs, labels, strict=False)]
    return list(outputs), labels


def _loss_fn(spec: TrainSpec, torch_spec: TorchSpec, weights: Any) -> Any:
    def loss(outputs: list[Any], labels: list[Any]) -> Any:
        total = None
        for fn, weight, output, label in zip(torch_spec.losses, torch_spec.loss_weights,
                                             outputs, labels, strict=False):
            value = fn(output, label)
            if weights is not None and value.dim() > 0:
                value = (value.reshape(len(weights), -1).mean(dim=1) * weights).mean()
            total = value * weight if total is None else total + value * weight
        return total
    return loss
