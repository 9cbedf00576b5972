"""Gradient compression for allreduce: a compressor turns a tensor into the tensor that is sent
(compress, which also returns what decompress needs) and the reduced result back."""
import torch

__all__ = ["Compression", "Compressor", "NoneCompressor", "FP16Compressor", "BF16Compressor"]


class Compressor:
    """Sends the tensor unchanged."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    """No compression."""


class _CastCompressor(Compressor):
    wire = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.wire:
            return tensor.to(cls.wire), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_CastCompressor):
    """Floating-point tensors travel as float16 and come back in their own dtype."""
    wire = torch.float16


class BF16Compressor(_CastCompressor):
    """Floating-point tensors travel as bfloat16 and come back in their own dtype."""
    wire = torch.bfloat16


class Compression:
    """The compressors, by name: Compression.none, Compression.fp16, Compression.bf16."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
