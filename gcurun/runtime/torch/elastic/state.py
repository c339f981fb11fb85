"""``TorchState``: a model, an optimizer, samplers and plain values, committed,
restored and synchronized together (Horovod's ``horovod.torch.elastic.state``)."""

from __future__ import annotations

import copy
from typing import Any

import torch

from gcurun.runtime.elastic.state import ObjectState
from gcurun.runtime.torch import basics
from gcurun.runtime.torch.elastic.sampler import ElasticSampler
from gcurun.runtime.torch.functions import (
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)


class StateHandler:
    """Saves, restores and synchronizes one kind of value."""

    def __init__(self, value: Any):
        self.value = value

    def save(self) -> None:
        raise NotImplementedError()

    def restore(self) -> None:
        raise NotImplementedError()

    def sync(self) -> None:
        raise NotImplementedError()

    def set_value(self, value: Any) -> None:
        self.value = value
        self.save()


class ModelStateHandler(StateHandler):
    def __init__(self, model: torch.nn.Module):
        super().__init__(model)
        self._saved_model_state = copy.deepcopy(model.state_dict())

    def save(self) -> None:
        self._saved_model_state = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(self._saved_model_state)

    def sync(self) -> None:
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(StateHandler):
    def __init__(self, optimizer: torch.optim.Optimizer):
        super().__init__(optimizer)
        self._saved_optimizer_state = copy.deepcopy(optimizer.state_dict())

    def save(self) -> None:
        self._saved_optimizer_state = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(self._saved_optimizer_state)

    def sync(self) -> None:
        broadcast_optimizer_state(self.value, root_rank=0)


class SamplerStateHandler(StateHandler):
    def __init__(self, sampler: ElasticSampler):
        super().__init__(sampler)
        self._saved_sampler_state = copy.deepcopy(sampler.state_dict())

    def save(self) -> None:
        self._saved_sampler_state = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(self._saved_sampler_state)

    def sync(self) -> None:
        state_dict = self.value.state_dict()
        self.value.load_state_dict(broadcast_object(state_dict, 0,
                                                    name="gcurun.elastic.sampler"))


_handler_registry: list[tuple[type, type[StateHandler]]] = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry() -> list[tuple[type, type[StateHandler]]]:
    return _handler_registry


def set_handler_registry(registry: list[tuple[type, type[StateHandler]]]) -> None:
    global _handler_registry
    _handler_registry = registry


def _get_handler(value: Any) -> StateHandler | None:
    for kind, handler in _handler_registry:
        if isinstance(value, kind):
            return handler(value)
    return None


class TorchState(ObjectState):
    """State of a PyTorch job: ``model``, ``optimizer``, samplers and plain values.

    ``commit()`` copies them to host memory; ``restore()`` returns to the copy;
    ``sync()`` broadcasts rank 0's parameters, optimizer state and sampler positions,
    then the plain values. Assigning to a handled name (``state.model = other``)
    replaces and saves it."""

    def __init__(self, model: torch.nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None, **kwargs: Any):
        kwargs.update(model=model, optimizer=optimizer)
        self._handlers, kwargs = _get_handlers(kwargs)
        for name, handler in self._handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=basics.rank, **kwargs)

    def save(self) -> None:
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self) -> None:
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self) -> None:
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def reset(self) -> None:
        """A new generation: re-arm every DistributedOptimizer for the new size."""
        from gcurun.runtime.torch.optimizer import is_distributed

        for handler in self._handlers.values():
            if isinstance(handler, OptimizerStateHandler) and is_distributed(handler.value):
                handler.value.rearm()

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(self, "_handlers") and name in self._handlers:
            self._handlers[name].set_value(value)
        super().__setattr__(name, value)


def _get_handlers(kwargs: dict[str, Any]) -> tuple[dict[str, StateHandler], dict[str, Any]]:
    handlers, remainder = {}, {}
    for name, value in kwargs.items():
        handler = _get_handler(value)
        if handler is not None:
            handlers[name] = handler
        else:
            remainder[name] = value
    return handlers, remainder
