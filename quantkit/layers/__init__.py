"""One nn.Module per quantized format; each is built with ``from_linear`` and forwards to quantkit.ops."""
from quantkit.layers.base import QuantizedLinear
from quantkit.layers.fp8_block import Fp8BlockLinear
from quantkit.layers.int4 import Int4WeightOnlyLinear
from quantkit.layers.int8 import Int8DynamicLinear, Int8WeightOnlyLinear

__all__ = ["QuantizedLinear", "Fp8BlockLinear", "Int8DynamicLinear", "Int8WeightOnlyLinear", "Int4WeightOnlyLinear"]
