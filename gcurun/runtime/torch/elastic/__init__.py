"""Elastic training for PyTorch (Horovod's ``horovod.torch.elastic``):
``hvd.elastic.run``, ``TorchState``, ``ElasticSampler`` and the neutral state classes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gcurun.runtime.elastic import (
    HostsUpdatedInterrupt,
    HostUpdateResult,
    ObjectState,
    RendezvousLost,
    State,
    WorkerRemoved,
    run_fn,
)
from gcurun.runtime.torch import basics
from gcurun.runtime.torch.elastic.sampler import ElasticSampler
from gcurun.runtime.torch.elastic.state import (
    StateHandler,
    TorchState,
    get_handler_registry,
    set_handler_registry,
)


def _reset() -> None:
    basics.shutdown()
    basics.init()


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate ``func(state, ...)``: on a lost peer the last commit is restored, the
    job re-forms in this process (``shutdown(); init()``) and ``func`` runs again from
    the top after the reset callbacks and ``state.sync()``."""
    return run_fn(func, _reset)


__all__ = ["ElasticSampler", "HostUpdateResult", "HostsUpdatedInterrupt", "ObjectState",
           "RendezvousLost", "State", "StateHandler", "TorchState", "WorkerRemoved",
           "get_handler_registry", "run", "set_handler_registry"]
