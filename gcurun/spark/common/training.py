"""What the ranks of every Estimator share: the plain-data description of a training run
(``TrainSpec``), the run's checkpoint and logs in the store, and weight digests."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gcurun.spark.common.store import Store
    from gcurun.spark.common.util import ColumnInfo


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    """Everything a rank needs besides the model: where the data and the run are, and
    how to go through the data. ``steps_per_epoch`` is the same on every rank."""

    store: Store
    run_id: str
    train_path: str
    val_path: str | None
    train_rows: int
    val_rows: int
    metadata: dict[str, ColumnInfo]
    feature_cols: tuple[str, ...]
    label_cols: tuple[str, ...]
    sample_weight_col: str | None
    batch_size: int
    val_batch_size: int
    epochs: int
    steps_per_epoch: int
    validation_steps: int | None
    shuffle: bool
    seed: int | None
    verbose: int

    @property
    def columns(self) -> list[str]:
        extra = [self.sample_weight_col] if self.sample_weight_col else []
        return list(dict.fromkeys([*self.feature_cols, *self.label_cols, *extra]))


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A run's last checkpoint: the framework's bytes, the epochs done and the history."""

    data: bytes
    epochs_done: int
    history: dict[str, list[float]]


def checkpoint_paths(store: Store, run_id: str, suffix: str) -> tuple[str, str] | None:
    """The run's checkpoint file and its JSON companion; None when the store keeps no runs."""
    directory = store.get_checkpoint_path(run_id)
    if directory is None:
        return None
    name = store.get_checkpoint_filename()
    return store.join(directory, f"{name}.{suffix}"), store.join(directory, f"{name}.json")


def load_checkpoint(store: Store, run_id: str, suffix: str) -> Checkpoint | None:
    """The run's last checkpoint, or None when it has none."""
    paths = checkpoint_paths(store, run_id, suffix)
    if paths is None or not store.exists(paths[1]) or not store.exists(paths[0]):
        return None
    meta = json.loads(store.read_text(paths[1]))
    return Checkpoint(store.read(paths[0]), int(meta["epochs_done"]), meta["history"])


def save_checkpoint(store: Store, run_id: str, suffix: str, checkpoint: Checkpoint) -> None:
    """Write the checkpoint, then its JSON (so the JSON names a complete file), and add
    the epoch's line to the run's ``logs/metrics.jsonl``."""
    paths = checkpoint_paths(store, run_id, suffix)
    if paths is None:
        return
    store.write(paths[0], checkpoint.data)
    store.write_text(paths[1], json.dumps({"epochs_done": checkpoint.epochs_done,
                                           "history": checkpoint.history}))
    logs = store.get_logs_path(run_id)
    if logs is not None:
        last = {k: v[-1] for k, v in checkpoint.history.items() if v}
        store.append_text(store.join(logs, "metrics.jsonl"),
                          json.dumps({"epoch": checkpoint.epochs_done, **last}) + "\n")


def digest(arrays: Iterable[Any]) -> str:
    """SHA-256 over the bytes of ``arrays`` (numpy arrays), in order: equal on two ranks
    exactly when their weights are bit for bit the same."""
    import numpy as np

    h = hashlib.sha256()
    for array in arrays:
        value = np.ascontiguousarray(array)
        h.update(str((value.dtype.str, value.shape)).encode())
        h.update(value.tobytes())
    return h.hexdigest()


def append_history(history: dict[str, list[float]], values: dict[str, float]) -> None:
    for name, value in values.items():
        history.setdefault(name, []).append(float(value))


def metric_name(fn: Any, label: str, labels: Sequence[str]) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return name if len(labels) == 1 else f"{label}_{name}"
