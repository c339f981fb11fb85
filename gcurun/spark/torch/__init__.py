"""Horovod's ``horovod.spark.torch``: ``TorchEstimator`` and ``TorchModel``."""

from __future__ import annotations

from gcurun.spark.torch.estimator import TorchEstimator, TorchModel

__all__ = ["TorchEstimator", "TorchModel"]
