"""Pure-PyTorch definitions of every quantize, dequantize and matmul quantkit uses.

These functions *are* the numerics: the Triton kernels in ``quantkit.kernels`` compute the same
functions (bit-exactly for quantized integers/fp8 codes, within float32 rounding for matmul outputs),
and the checkpoint formats store what these functions produce. They run on any device and dtype,
including ``meta`` (shapes only), and are what the layers use wherever no kernel applies.
"""
from quantkit.reference.fp8_block import (
    FP8_MAX,
    dequantize_act_fp8_group,
    dequantize_weight_fp8_block,
    fp8_block_gemm,
    fp8_block_linear,
    quantize_act_fp8_group,
    quantize_weight_fp8_block,
    round_scale_ue8m0,
)
from quantkit.reference.int4 import (
    dequantize_weight_int4,
    int4_qparams_minmax,
    quantize_int4_with_qparams,
    int4_weight_only_linear,
    pack_int4,
    quantize_weight_int4,
    unpack_int4,
)
from quantkit.reference.int8 import (
    INT8_MAX,
    dequantize_weight_int8,
    int8_dynamic_linear,
    int8_gemm_int32,
    int8_scaled_gemm,
    int8_weight_only_linear,
    quantize_act_int8_per_token,
    quantize_weight_int8_per_channel,
)

__all__ = [name for name in dir() if not name.startswith("_")]
