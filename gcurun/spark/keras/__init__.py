"""Horovod's ``horovod.spark.keras``: ``KerasEstimator`` and ``KerasModel``."""

from __future__ import annotations

from gcurun.spark.keras.estimator import KerasEstimator, KerasModel

__all__ = ["KerasEstimator", "KerasModel"]
