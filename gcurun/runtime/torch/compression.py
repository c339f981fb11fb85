"""Gradient compression for allreduce: ``Compression.none`` and ``Compression.fp16``."""

from __future__ import annotations

from typing import Any

import torch


class Compressor:
    """Turns a tensor into what is sent and back: ``compress`` returns the tensor to
    reduce and a context, which ``decompress`` takes with the reduced tensor."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (half the bytes) and restores their
    dtype after the reduction; other tensors go as they are."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        dtype = tensor.dtype
        if dtype.is_floating_point and dtype != torch.float16:
            return tensor.to(torch.float16), dtype
        return tensor, dtype

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        if ctx is not None and tensor.dtype != ctx:
            return tensor.to(ctx)
        return tensor


class Compression:
    """The compressors by name, as Horovod spells them."""

    none = NoneCompressor
    fp16 = FP16Compressor
