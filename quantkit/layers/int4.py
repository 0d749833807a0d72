"""Int4WeightOnlyLinear (A16W4): 4-bit weights in groups along K with a scale and zero-point each."""
from __future__ import annotations

import torch
from torch import nn

from quantkit import ops
from quantkit.layers.base import QuantizedLinear
from quantkit.reference.int4 import dequantize_weight_int4


class Int4WeightOnlyLinear(QuantizedLinear):
    """Buffers: ``weight_packed`` uint8 [N, K/2] (two codes a byte, low nibble first — as int32 words
    the compressed-tensors order; layout in :mod:`quantkit.reference.int4`); ``weight_scale`` [N, K/g]
    in the model dtype; ``weight_zero_point`` uint8 [N, K/g] (8 everywhere when symmetric); optional
    ``bias`` [N]."""

    format_name = "int4-weight-only"
    quantized_buffers = ("weight_packed", "weight_scale", "weight_zero_point")

    def __init__(self, in_features: int, out_features: int, bias: bool = True, group_size: int = 128,
                 symmetric: bool = False, dtype: torch.dtype = torch.bfloat16, scale_dtype: torch.dtype | None = None,
                 device=None) -> None:
        super().__init__(in_features, out_features)
        if in_features % group_size:
            raise ValueError(f"Int4WeightOnlyLinear: in_features={in_features} is not a multiple of "
                             f"group_size={group_size}")
        self.group_size = group_size
        self.symmetric = symmetric
        groups = in_features // group_size
        self.register_buffer("weight_packed",
                             torch.empty(out_features, in_features // 2, dtype=torch.uint8, device=device))
        self.register_buffer("weight_scale",
                             torch.empty(out_features, groups, dtype=scale_dtype or dtype, device=device))
        self.register_buffer("weight_zero_point", torch.empty(out_features, groups, dtype=torch.uint8, device=device))
        self._register_bias(bias, dtype, device)

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int = 128, symmetric: bool = False,
                    quantizer=None) -> "Int4WeightOnlyLinear":
        """``quantizer(weight, group_size, symmetric, scale_dtype) -> (packed, scale, zero)`` chooses
        the rounding (min-max by default)."""
        w = linear.weight
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, group_size, symmetric,
                    dtype=w.dtype, device=w.device)
        if not w.is_meta:
            if quantizer is None:
                packed, scale, zero = ops.quantize_weight("int4_weight_only", w, group_size, symmetric, w.dtype)
            else:
                packed, scale, zero = quantizer(w, group_size, symmetric, w.dtype)
            layer.weight_packed, layer.weight_scale, layer.weight_zero_point = packed, scale, zero
            if linear.bias is not None:
                layer.bias = linear.bias.detach().clone()
        return layer

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # nn.Linear's name: fc(input=x) works
        return ops.int4_weight_only_linear(input, self.weight_packed, self.weight_scale, self.weight_zero_point,
                                           self.bias, self.group_size, self.in_features, layer=self)

    def kernel_args(self) -> tuple:
        """The arguments after x of ``quantkit.kernels.int4_weight_only.linear`` (and of the reference)."""
        return (self.weight_packed, self.weight_scale, self.weight_zero_point, self.bias, self.group_size)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return dequantize_weight_int4(self.weight_packed, self.weight_scale, self.weight_zero_point,
                                      self.group_size, dtype)

    def extra_repr(self) -> str:
        kind = "symmetric" if self.symmetric else "asymmetric"
        return super().extra_repr() + f" (uint4 weight, group_size={self.group_size}, {kind})"
