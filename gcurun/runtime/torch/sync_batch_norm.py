"""SyncBatchNorm: batch normalization over the whole global batch, not each rank's part.

In training, every rank's per-channel sums (and, in backward, the sums of the incoming
gradient) are allreduced, so each rank normalizes with the statistics of all the ranks'
samples, exactly as one process would with the full batch. In evaluation it is an
ordinary BatchNorm over its running statistics.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from gcurun.runtime.torch import basics
from gcurun.runtime.torch.mpi_ops import Sum, allreduce


class SyncBatchNorm(_BatchNorm):
    """Drop-in for ``torch.nn.BatchNorm1d/2d/3d`` (inputs of shape (N, C, ...))."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 device: Any = None, dtype: Any = None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype)

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm expects an input of shape (N, C, ...), got "
                             f"{input.dim()} dimension(s)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        if not self.training or basics.size() == 1:
            return super().forward(input)
        factor = 0.0
        if self.track_running_stats:
            assert self.num_batches_tracked is not None
            self.num_batches_tracked.add_(1)
            factor = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                      else self.momentum)
        return _SyncBatchNorm.apply(input, self.weight, self.bias,
                                    self.running_mean if self.track_running_stats else None,
                                    self.running_var if self.track_running_stats else None,
                                    self.eps, factor)


def _channels_shape(input: torch.Tensor) -> list[int]:
    return [1, -1] + [1] * (input.dim() - 2)


class _SyncBatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, input: torch.Tensor, weight: torch.Tensor | None,
                bias: torch.Tensor | None, running_mean: torch.Tensor | None,
                running_var: torch.Tensor | None, eps: float,
                factor: float) -> torch.Tensor:
        dims = [d for d in range(input.dim()) if d != 1]
        channels = input.shape[1]
        wide = input.detach().to(torch.float64)
        local = torch.cat([wide.sum(dims), (wide * wide).sum(dims),
                           torch.tensor([input.numel() / max(channels, 1)],
                                        dtype=torch.float64)])
        stats = allreduce(local, op=Sum, name=None)
        count = stats[-1].item()
        if count <= 1:
            raise ValueError(f"SyncBatchNorm needs more than 1 value per channel over all "
                             f"ranks in training, got {int(count)}")
        mean = stats[:channels] / count
        var = stats[channels:2 * channels] / count - mean * mean
        invstd = torch.rsqrt(var.clamp(min=0) + eps)
        if running_mean is not None and running_var is not None:
            running_mean.mul_(1 - factor).add_(mean.to(running_mean.dtype), alpha=factor)
            running_var.mul_(1 - factor).add_((var * count / (count - 1)).to(
                running_var.dtype), alpha=factor)
        shape = _channels_shape(input)
        mean_, invstd_ = mean.to(input.dtype).view(shape), invstd.to(input.dtype).view(shape)
        normalized = (input - mean_) * invstd_
        ctx.save_for_backward(normalized, weight, invstd_)
        ctx.count = count
        out = normalized
        if weight is not None:
            out = out * weight.view(shape)
        if bias is not None:
            out = out + bias.view(shape)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        normalized, weight, invstd = ctx.saved_tensors
        dims = [d for d in range(grad.dim()) if d != 1]
        channels = grad.shape[1]
        shape = _channels_shape(grad)
        sum_dy = grad.sum(dims)
        sum_dy_xhat = (grad * normalized).sum(dims)
        # Gradients of this rank's parameters are local; DistributedOptimizer averages them.
        grad_weight = sum_dy_xhat if weight is not None and ctx.needs_input_grad[1] else None
        grad_bias = sum_dy if ctx.needs_input_grad[2] else None
        grad_input = None
        if ctx.needs_input_grad[0]:
            both = allreduce(torch.cat([sum_dy, sum_dy_xhat]).to(torch.float64), op=Sum,
                             name=None).to(grad.dtype)
            mean_dy = (both[:channels] / ctx.count).view(shape)
            mean_dy_xhat = (both[channels:] / ctx.count).view(shape)
            scale = invstd if weight is None else invstd * weight.view(shape)
            grad_input = scale * (grad - mean_dy - normalized * mean_dy_xhat)
        return grad_input, grad_weight, grad_bias, None, None, None, None
