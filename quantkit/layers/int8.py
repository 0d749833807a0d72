"""Int8DynamicLinear (W8A8) and Int8WeightOnlyLinear (A16W8): int8 weights, one scale per output channel."""
from __future__ import annotations

import torch
from torch import nn

from quantkit import ops
from quantkit.layers.base import QuantizedLinear
from quantkit.reference.int8 import dequantize_weight_int8


class _Int8PerChannelLinear(QuantizedLinear):
    """Buffers: ``weight`` int8 [N, K]; ``weight_scale`` float32 [N]; optional ``bias`` [N]."""

    quantized_buffers = ("weight", "weight_scale")
    _family = ""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 dtype: torch.dtype = torch.bfloat16, device=None) -> None:
        super().__init__(in_features, out_features)
        self.register_buffer("weight", torch.empty(out_features, in_features, dtype=torch.int8, device=device))
        self.register_buffer("weight_scale", torch.empty(out_features, dtype=torch.float32, device=device))
        self._register_bias(bias, dtype, device)

    @classmethod
    def from_linear(cls, linear: nn.Linear):
        w = linear.weight
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, dtype=w.dtype, device=w.device)
        if not w.is_meta:
            layer.weight, layer.weight_scale = ops.quantize_weight(cls._family, w)
            if linear.bias is not None:
                layer.bias = linear.bias.detach().clone()
        return layer

    def kernel_args(self) -> tuple:
        """The arguments after x of the family's ``quantkit.kernels.<family>.linear`` (and of the reference)."""
        return (self.weight, self.weight_scale, self.bias)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return dequantize_weight_int8(self.weight, self.weight_scale, dtype)


class Int8DynamicLinear(_Int8PerChannelLinear):
    """int8 weights per output channel × int8 activations per token (computed at run time), int32 accumulation."""

    format_name = "int8-dynamic"
    _family = "int8_dynamic"

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # nn.Linear's name: fc(input=x) works
        return ops.int8_dynamic_linear(input, self.weight, self.weight_scale, self.bias, layer=self)

    def extra_repr(self) -> str:
        return super().extra_repr() + " (int8 weight per channel, int8 activation per token)"


class Int8WeightOnlyLinear(_Int8PerChannelLinear):
    """int8 weights per output channel; activations stay in the model dtype."""

    format_name = "int8-weight-only"
    _family = "int8_weight_only"

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # nn.Linear's name: fc(input=x) works
        return ops.int8_weight_only_linear(input, self.weight, self.weight_scale, self.bias, layer=self)

    def extra_repr(self) -> str:
        return super().extra_repr() + " (int8 weight per channel)"
