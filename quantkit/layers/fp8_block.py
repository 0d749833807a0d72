"""Fp8BlockLinear: e4m3 weights with one float32 scale per 128×128 block, e4m3 activations per 1×128."""
from __future__ import annotations

import torch
from torch import nn

from quantkit import ops
from quantkit.layers.base import QuantizedLinear
from quantkit.reference.common import ceil_div
from quantkit.reference.fp8_block import FP8_DTYPE, dequantize_weight_fp8_block


class Fp8BlockLinear(QuantizedLinear):
    """Buffers: ``weight`` float8_e4m3fn [N, K]; ``weight_scale`` float32 [ceil(N/b), ceil(K/b)]
    (a multiplier, DeepSeek's ``weight_scale_inv``); optional ``bias`` [N]."""

    format_name = "fp8-block"
    quantized_buffers = ("weight", "weight_scale")

    def __init__(self, in_features: int, out_features: int, bias: bool = True, block_size: int = 128,
                 scale_fmt: str | None = None, dtype: torch.dtype = torch.bfloat16, device=None) -> None:
        super().__init__(in_features, out_features)
        self.block_size = block_size
        self.scale_fmt = scale_fmt
        nb, kb = ceil_div(out_features, block_size), ceil_div(in_features, block_size)
        self.register_buffer("weight", torch.empty(out_features, in_features, dtype=FP8_DTYPE, device=device))
        self.register_buffer("weight_scale", torch.empty(nb, kb, dtype=torch.float32, device=device))
        self._register_bias(bias, dtype, device)

    @classmethod
    def from_linear(cls, linear: nn.Linear, block_size: int = 128, scale_fmt: str | None = None) -> "Fp8BlockLinear":
        w = linear.weight
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, block_size, scale_fmt,
                    dtype=w.dtype, device=w.device)
        if not w.is_meta:
            layer.weight, layer.weight_scale = ops.quantize_weight("fp8_block", w, block_size, scale_fmt)
            if linear.bias is not None:
                layer.bias = linear.bias.detach().clone()
        return layer

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # nn.Linear's name: fc(input=x) works
        return ops.fp8_block_linear(input, self.weight, self.weight_scale, self.bias, self.block_size, self.scale_fmt,
                                    layer=self)

    def kernel_args(self) -> tuple:
        """The arguments after x of ``quantkit.kernels.fp8_block.linear`` (and of the reference)."""
        return (self.weight, self.weight_scale, self.bias, self.block_size, self.scale_fmt)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return dequantize_weight_fp8_block(self.weight, self.weight_scale, self.block_size, dtype)

    def extra_repr(self) -> str:
        fmt = f", scale_fmt={self.scale_fmt}" if self.scale_fmt else ""
        return super().extra_repr() + f" (e4m3 weight, {self.block_size}x{self.block_size} blocks{fmt})"
