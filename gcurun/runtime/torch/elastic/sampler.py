"""Horovod's ``ElasticSampler``: a sampler that knows which samples of the epoch were
processed, so that after a reset the rest is split over the new set of ranks."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sized
from typing import Any

import torch.utils.data

from gcurun.runtime.torch import basics


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions the unprocessed indices of ``dataset`` over the ranks (padded with its
    own head to a multiple of ``size()``), shuffled per epoch with ``seed + epoch``.

    Call :meth:`record_batch` after each batch and :meth:`set_epoch` at the **end** of
    each epoch; keep it in a ``TorchState`` so its position is committed and synced."""

    def __init__(self, dataset: Sized, shuffle: bool = True, seed: int = 0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 1
        self.rank = 0
        self.remaining_indices: list[int] = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices: list[int]) -> None:
        self.processed_num += len(indices) * self.num_replicas

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self) -> None:
        """Re-read ``size()``/``rank()`` and re-partition what is left of the epoch."""
        self.num_replicas = basics.size()
        self.rank = basics.rank()
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(indices)
        self.remaining_indices = indices[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        indices = list(self.remaining_indices)
        while indices and len(indices) < self.total_size:
            indices += indices[:self.total_size - len(indices)]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples
