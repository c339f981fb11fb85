"""Elastic training, framework-neutral (Horovod's ``horovod.common.elastic``): the state
objects, the elastic loop, and the exceptions that drive it. Bindings add their own
state classes (``gcurun.runtime.torch.elastic.TorchState``)."""

from __future__ import annotations

from gcurun.rendezvous.elastic import RendezvousLost, WorkerRemoved
from gcurun.runtime.elastic.loop import recoverable, run, run_fn
from gcurun.runtime.elastic.state import (
    HostsUpdatedInterrupt,
    HostUpdateResult,
    ObjectState,
    State,
)

__all__ = ["HostUpdateResult", "HostsUpdatedInterrupt", "ObjectState", "RendezvousLost",
           "State", "WorkerRemoved", "recoverable", "run", "run_fn"]
