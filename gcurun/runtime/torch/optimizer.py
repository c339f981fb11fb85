"""DistributedOptimizer: a torch optimizer whose gradients are averaged over the ranks.

Each parameter's gradient starts its allreduce from a hook the moment backward has
accumulated it, so communication overlaps the rest of the backward pass; ``step()``
waits for them all, then applies the wrapped optimizer's update.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from gcurun.runtime.torch import mpi_ops
from gcurun.runtime.torch._optimizer_args import Group, named_parameters_of, parameter_groups
from gcurun.runtime.torch.compression import (
    Compression,
    Compressor,
    compress_reusing,
    decompress_into,
    reuses_memory,
)
from gcurun.runtime.torch.mpi_ops import Average
from gcurun.runtime.torch.process_sets import ProcessSet, global_process_set

_created = itertools.count()


class _DistributedOptimizer(torch.optim.Optimizer):
    """The methods DistributedOptimizer adds to (or puts before) the wrapped optimizer's
    class; instances are made by :func:`DistributedOptimizer`."""

    def _distribute(self, named_parameters: Sequence[tuple[str, torch.Tensor]],
                    compression: type[Compressor], backward_passes_per_step: int, op: Any,
                    gradient_predivide_factor: float, groups: list[Group],
                    sparse_as_dense: bool, process_set: ProcessSet) -> None:
        self._compression = compression
        # Names of this optimizer's own ops: every rank creates its optimizers in the
        # same order, so the count names the same optimizer everywhere.
        self._own_name = f"gcurun.optimizer.{next(_created)}"
        self._parameter_names = {p: name for name, p in named_parameters}
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._allreduce_delay = {p: backward_passes_per_step for _, p in named_parameters}
        self._requires_update = [p for group in self.param_groups for p in group["params"]
                                 if p.requires_grad]
        self._requires_update.sort(key=lambda p: self._parameter_names[p])
        self._handles: dict[Any, tuple[Any, Any]] = {}
        self._filled: set[torch.Tensor] = set()
        # What the compressor returned for each gradient last step (memory it may write
        # into again, once that step's allreduce is done).
        self._spares: dict[torch.Tensor, torch.Tensor] = {}
        self._group_of = {p: group for group in groups for p in group}
        self._group_ready = {group: 0 for group in groups}
        self._synchronized = False
        self._should_synchronize = True
        self._hooks: list[Any] = []
        self._communicating = self._wants_to_communicate()
        # On the engine (the job's or the set's), each gradient's allreduce starts from
        # its hook and overlaps the rest of backward.
        self._overlap = self._communicating
        if self._communicating:
            self._register_hooks()

    def _wants_to_communicate(self) -> bool:
        return bool(self.process_set.included()) and (self.process_set.size() or 1) > 1

    def _register_hooks(self) -> None:
        for p in self._requires_update:
            self._hooks.append(p.register_post_accumulate_grad_hook(self._make_hook(p)))

    # -- hooks and allreduces ------------------------------------------------------------

    def _make_hook(self, p: torch.Tensor) -> Any:
        def hook(_: torch.Tensor) -> None:
            if self._allreduce_delay[p] <= 0:
                raise AssertionError(
                    "gradients were computed more than backward_passes_per_step="
                    f"{self.backward_passes_per_step} times before step(); raise "
                    "backward_passes_per_step to accumulate gradients locally")
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] > 0 or not self._overlap:
                self._handles[p] = (None, None)
                return
            group = self._group_of.get(p)
            if group is None:
                self._handles[p] = self._allreduce_grad_async(p)
                return
            self._group_ready[group] += 1
            if self._group_ready[group] == len(group):
                self._start_group(group)
        return hook

    def _scale_factors(self) -> tuple[float, float]:
        if self.op == Average:
            # Averaging splits into a division before the sum and the rest after it.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_grad_async(self, p: torch.Tensor) -> tuple[int, Any]:
        name = self._parameter_names.get(p)
        self._fill_missing(p)
        grad = p.grad
        assert grad is not None
        if grad.is_sparse:
            if not self.sparse_as_dense:
                return (mpi_ops.sparse_allreduce_async(grad, name, self.op, self.process_set),
                        ("sparse", None, None))
            grad = grad.to_dense()
            pre, post = self._scale_factors()
            return (mpi_ops.allreduce_async_(grad, name=name, op=self.op, prescale_factor=pre,
                                             postscale_factor=post,
                                             process_set=self.process_set),
                    ("densified", grad, None))
        compressed, ctx = self._compress(p, grad)
        pre, post = self._scale_factors()
        handle = mpi_ops.allreduce_async_(compressed, name=name, op=self.op,
                                          prescale_factor=pre, postscale_factor=post,
                                          process_set=self.process_set)
        return handle, ("dense", compressed, ctx)

    def _start_group(self, group: Group, name: str | None = None) -> None:
        for p in group:
            self._handles.pop(p, None)
            self._fill_missing(p)
        pairs = [self._compress(p, _dense(_grad(p))) for p in group]
        pre, post = self._scale_factors()
        handle = mpi_ops.grouped_allreduce_async_(
            [t for t, _ in pairs], name=name or self._parameter_names.get(group[0]),
            op=self.op, prescale_factor=pre, postscale_factor=post,
            process_set=self.process_set)
        self._handles[group] = (handle, pairs)
        if group in self._group_ready:
            self._group_ready[group] = 0

    def _compress(self, p: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, Any]:
        compressed, ctx = compress_reusing(self._compression, grad, self._spares.get(p))
        if compressed is not grad and reuses_memory(self._compression):
            self._spares[p] = compressed
        return compressed, ctx

    def _start_missing(self) -> None:
        """Start what backward did not: groups and gradients some rank did not compute
        here, and those still accumulating (step() before backward_passes_per_step)."""
        for group in self._group_ready:
            if group not in self._handles:
                self._start_group(group)
        for p in self._requires_update:
            if p not in self._group_of and self._handles.get(p, (None,))[0] is None:
                self._handles[p] = self._allreduce_grad_async(p)

    def _start_all(self) -> None:
        """Start every gradient's reduction at once, in name order: the dense ones as one
        grouped (fused) allreduce, sparse ones each gathered on its own."""
        self._handles.clear()
        dense = []
        for p in self._requires_update:
            self._fill_missing(p)
            if p.grad is not None and p.grad.is_sparse and not self.sparse_as_dense:
                self._handles[p] = self._allreduce_grad_async(p)
            else:
                dense.append(p)
        if dense:
            self._start_group(tuple(dense), name=f"{self._own_name}.gradients")

    def _fill_missing(self, p: torch.Tensor) -> None:
        """No gradient here, but another rank may have one: contribute zeros."""
        if p.grad is None:
            p.grad = torch.zeros_like(p)
            self._filled.add(p)

    def _start_presence(self) -> int:
        """Start a Max-allreduce of which parameters had a gradient on this rank, so that
        those no rank had keep ``grad=None`` (the wrapped optimizer then skips them, as it
        would in a single process)."""
        present = torch.tensor([p not in self._filled for p in self._requires_update],
                               dtype=torch.uint8)
        return mpi_ops.allreduce_async_(present, name=f"{self._own_name}.present",
                                        op=mpi_ops.Max, process_set=self.process_set)

    def _apply(self, p: torch.Tensor, output: Any, how: tuple[str, Any, Any]) -> None:
        kind, _, ctx = how
        if kind == "sparse":
            p.grad = output
        elif kind == "densified":
            p.grad = self._compression.decompress(output, ctx).to_sparse()
        else:
            decompress_into(self._compression, output, ctx, _grad(p))

    # -- Horovod's public methods --------------------------------------------------------

    def synchronize(self) -> None:
        """Finish every gradient's allreduce (starting those backward did not start: no
        gradient on this rank, or fewer backward passes than backward_passes_per_step)
        and put the averages into ``.grad``."""
        if not self._communicating:
            self._reset_delays()
            self._synchronized = True
            return
        presence = None
        try:
            if self._overlap:
                self._start_missing()
            else:
                self._start_all()
            presence = self._start_presence()      # after the others: see _start_presence
            for key, (handle, how) in list(self._handles.items()):
                del self._handles[key]
                output = mpi_ops.synchronize(handle)
                if isinstance(key, tuple):
                    for p, out, (_, ctx) in zip(key, output, how, strict=True):
                        self._apply(p, out, ("densified" if p.grad.is_sparse else "dense",
                                             None, ctx))
                else:
                    self._apply(key, output, how)
            present = mpi_ops.synchronize(presence)
            presence = None
            for p, anywhere in zip(self._requires_update, present.tolist(), strict=True):
                if not anywhere:
                    p.grad = None
        finally:
            self._filled.clear()
            self._drain(presence)
            self._reset_delays()
            for group in self._group_ready:
                self._group_ready[group] = 0
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """``step()`` inside this context does not synchronize: for code that calls
        ``synchronize()`` itself first (to clip gradients, say)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure: Any = None) -> Any:
        if self._should_synchronize:
            if self._synchronized:
                # Horovod's words, which scripts and tests look for.
                warnings.warn("optimizer.step() called without "
                              "optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown "
                              "(the gradients are reduced again); wrap step() in "
                              "`with optimizer.skip_synchronize():`", stacklevel=2)
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    step.hooked = True  # type: ignore[attr-defined]  # torch must not wrap it twice

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self._handles:
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(), while gradient allreduces "
                "are pending; call step() (or synchronize()) first")
        super().zero_grad(set_to_none)

    def _drain(self, *more: int | None) -> None:
        """Synchronize the handles left after an error (and ``more``), so that their
        names are free for the next step (a name stays taken until its handle is
        synchronized); their own errors were the first one's consequences, or will show
        again."""
        handles, self._handles = self._handles, {}
        for handle in [h for h, _ in handles.values()] + list(more):
            if handle is not None:
                try:
                    mpi_ops.synchronize(handle)
                except Exception:  # noqa: BLE001 - the first error is already on its way
                    pass

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._drain()
        self._synchronized = False
        self._should_synchronize = True
        self._reset_delays()
        super().load_state_dict(state_dict)

    def set_backward_passes_per_step(self, passes: int) -> None:
        self.backward_passes_per_step = passes
        self._reset_delays()

    def _reset_delays(self) -> None:
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step

    # -- elastic jobs ----------------------------------------------------------------------

    def rearm(self) -> None:
        """Ready this optimizer for a new generation of an elastic job (its process set
        may have a new size): forget in-flight gradient allreduces, filled-in gradients and
        backward passes counted towards ``backward_passes_per_step``, and decide again
        whether it communicates (``size() > 1``), registering its gradient hooks if it
        starts to. Needed because both are decided at construction: a job may grow from
        one rank, and a failure inside ``backward()`` may leave allreduces half-started.
        """
        self._handles.clear()
        self._filled.clear()
        self._spares.clear()        # (an allreduce forgotten here may still write one)
        for group in self._group_ready:
            self._group_ready[group] = 0
        self._reset_delays()
        self._synchronized = False
        self._should_synchronize = True
        communicating = self._wants_to_communicate()
        if communicating and not self._hooks:
            self._register_hooks()
        self._communicating = communicating
        self._overlap = communicating and bool(self._hooks)


def is_distributed(optimizer: Any) -> bool:
    """Whether ``optimizer`` was made by :func:`DistributedOptimizer`."""
    return isinstance(optimizer, _DistributedOptimizer)


def _grad(p: torch.Tensor) -> torch.Tensor:
    grad = p.grad
    assert grad is not None, "filled in before any reduction starts"
    return grad


def _dense(grad: torch.Tensor) -> torch.Tensor:
    return grad.to_dense() if grad.is_sparse else grad


def DistributedOptimizer(optimizer: torch.optim.Optimizer,
                         named_parameters: Iterable[tuple[str, torch.Tensor]] | None = None,
                         compression: type[Compressor] = Compression.none,
                         backward_passes_per_step: int = 1, op: Any = Average,
                         gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                         groups: int | Sequence[Sequence[torch.Tensor]] | None = None,
                         sparse_as_dense: bool = False,
                         process_set: ProcessSet = global_process_set) -> Any:
    """Wrap ``optimizer`` so that ``step()`` applies gradients averaged over the ranks.

    The result is an instance of the wrapped optimizer's class (it shares its parameter
    groups and state). ``named_parameters`` (usually ``model.named_parameters()``) names
    the allreduces; ``compression`` (``Compression.fp16``) shrinks what is sent;
    ``backward_passes_per_step`` accumulates that many backward passes locally before
    reducing; ``op`` is Average (default), Sum or Adasum; ``gradient_predivide_factor``
    splits the averaging before and after the sum; ``groups`` (a count, or lists of
    parameters) reduces gradients together; ``sparse_as_dense`` reduces sparse gradients
    densely instead of gathering them.
    """
    if backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step={backward_passes_per_step}: must be 1 "
                         "or more")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor applies to op=Average only; drop it or "
                         "use op=Average")
    if num_groups:
        warnings.warn("num_groups is deprecated; use groups=", DeprecationWarning,
                      stacklevel=2)
        groups = num_groups if groups is None else groups
    named = named_parameters_of(optimizer, named_parameters)
    cls = type(optimizer.__class__.__name__, (_DistributedOptimizer, optimizer.__class__),
               {"__module__": optimizer.__class__.__module__})
    distributed: Any = object.__new__(cls)
    distributed.__dict__.update(optimizer.__dict__)
    distributed._distribute(named, compression, backward_passes_per_step, op,
                            gradient_predivide_factor,
                            parameter_groups(optimizer, named, groups),
                            sparse_as_dense, process_set)
    return distributed
