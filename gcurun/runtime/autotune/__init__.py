"""Autotune: rank 0 searches the engine's knobs while the job trains, every rank takes
each new setting at the same cycle, and the job ends with a summary of what was chosen.

:func:`make_tuner` builds rank 0's :class:`~gcurun.runtime.autotune.tuner.Tuner`;
the engine feeds it and carries its decisions (:mod:`gcurun.runtime.engine.cycles`).
"""

from __future__ import annotations

import logging

from gcurun.runtime.autotune.knobs import Knobs, held_knobs, start_knobs
from gcurun.runtime.autotune.store import Shape
from gcurun.runtime.autotune.tuner import Tuner
from gcurun.runtime.settings import RuntimeEnv

__all__ = ["Knobs", "Shape", "Tuner", "make_tuner", "show_messages"]

_handler: logging.Handler | None = None


def make_tuner(env: RuntimeEnv, shape: Shape, two_levels: bool) -> Tuner:
    """Rank 0's tuner for ``env.autotune`` (set). Raises UsageError when optuna is
    missing; OSError when the log file cannot be opened."""
    assert env.autotune is not None
    return Tuner(env.autotune, start_knobs(env), held_knobs(env, two_levels), shape)


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno <= logging.INFO else f"{record.levelname.lower()}: "
        return f"gcurun: autotune: {level}{record.getMessage()}"


def show_messages() -> None:
    """Autotune's messages (and its summary) on rank 0's stderr, once per process,
    unless the script configured the ``gcurun.autotune`` logger itself."""
    global _handler
    logger = logging.getLogger("gcurun.autotune")
    if _handler is not None or logger.handlers:
        return
    _handler = logging.StreamHandler()
    _handler.setFormatter(_Formatter())
    logger.addHandler(_handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(min(logging.INFO, logging.getLogger("gcurun").getEffectiveLevel()))
    logger.propagate = False
