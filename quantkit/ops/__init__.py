"""Operators the layers call: custom ops with fake implementations, dispatching to kernels or reference."""
from quantkit.ops.dispatch import backend_report
from quantkit.ops.linear import (
    fp8_block_linear,
    int4_weight_only_linear,
    int8_dynamic_linear,
    int8_weight_only_linear,
)
from quantkit.ops.quantize import quantize_weight

__all__ = [
    "backend_report",
    "fp8_block_linear",
    "int4_weight_only_linear",
    "int8_dynamic_linear",
    "int8_weight_only_linear",
    "quantize_weight",
]
