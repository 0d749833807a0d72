"""FP8 block-wise format (DeepSeek-V3 / Hugging Face "fp8", compressed-tensors float-quantized block).

Weight ``W`` [N, K] (out × in) is cut into ``b × b`` blocks (b = 128 by default; the last block row
or column may be partial). Per block::

    amax  = max(|W_blk|) computed in float32, floored at AMAX_EPS
    scale = amax / 448                      (float32; a *multiplier*, DeepSeek's weight_scale_inv)
    Wq    = fp8_e4m3fn(clamp(W_blk / scale, -448, 448))   (IEEE division, round to nearest even)

so ``W ≈ Wq * scale``; ``scale`` has shape [ceil(N/b), ceil(K/b)].

Activations ``x`` [M, K] are quantized at run time per token (row) in groups of ``g`` (= b) along K,
the same way, giving ``xq`` [M, K] e4m3 and ``x_scale`` [M, ceil(K/g)] float32.

With ``scale_fmt="ue8m0"`` every scale is rounded *up* to a power of two (DeepSeek-V3.1 style), so
it fits an 8-bit exponent; the rounding is done on the float32 bits and is exact.

The linear layer computes, in float32::

    y[m, n] = sum_k (xq[m, k] * x_scale[m, k // g]) * (Wq[n, k] * w_scale[n // b, k // b]) (+ bias[n])

and casts to the activation dtype. The reference dequantizes both operands to float32 and does one
float32 matmul; kernels accumulate each K block in float32 and scale per block, which agrees within
float32 rounding.
"""
from __future__ import annotations

import torch

from quantkit.reference.common import AMAX_EPS, ceil_div, div_exact, pad_to_multiple

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0


def round_scale_ue8m0(scale: torch.Tensor) -> torch.Tensor:
    """Round positive float32 scales up to the next power of two, exactly (via the float32 bits)."""
    bits = scale.float().contiguous().view(torch.int32)
    exponent = bits & 0x7F800000
    mantissa = bits & 0x007FFFFF
    rounded = torch.where(mantissa != 0, exponent + 0x00800000, exponent)
    return rounded.view(torch.float32)


def _check_scale_fmt(scale_fmt: str | None) -> None:
    if scale_fmt not in (None, "ue8m0"):
        raise ValueError(f"scale_fmt must be None or 'ue8m0', got {scale_fmt!r}")


def _scale_from_amax(amax: torch.Tensor, scale_fmt: str | None) -> torch.Tensor:
    scale = div_exact(amax.clamp(min=AMAX_EPS), FP8_MAX)
    if scale_fmt == "ue8m0":
        scale = round_scale_ue8m0(scale)
    return scale


def quantize_weight_fp8_block(
    weight: torch.Tensor, block_size: int = 128, scale_fmt: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``weight`` [N, K] to (e4m3 [N, K], float32 scales [ceil(N/b), ceil(K/b)])."""
    _check_scale_fmt(scale_fmt)
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D [out, in], got shape {tuple(weight.shape)}")
    n, k = weight.shape
    b = block_size
    nb, kb = ceil_div(n, b), ceil_div(k, b)
    w = pad_to_multiple(pad_to_multiple(weight.float(), 0, b), 1, b).view(nb, b, kb, b)
    amax = w.abs().amax(dim=(1, 3))
    scale = _scale_from_amax(amax, scale_fmt)
    q = (w / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    q = q.view(nb * b, kb * b)[:n, :k].contiguous()
    return q, scale


def dequantize_weight_fp8_block(
    weight_q: torch.Tensor, scale: torch.Tensor, block_size: int = 128, dtype=torch.float32
) -> torch.Tensor:
    n, k = weight_q.shape
    b = block_size
    expected = (ceil_div(n, b), ceil_div(k, b))
    if tuple(scale.shape) != expected:
        raise ValueError(
            f"fp8 block scale has shape {tuple(scale.shape)}, expected {expected} for weight "
            f"{(n, k)} with block size {b}"
        )
    s = scale.float().repeat_interleave(b, 0)[:n].repeat_interleave(b, 1)[:, :k]
    return (weight_q.float() * s).to(dtype)


def quantize_act_fp8_group(
    x: torch.Tensor, group_size: int = 128, scale_fmt: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` [M, K] per row in groups of ``group_size`` along K.

    Returns (e4m3 [M, K], float32 scales [M, ceil(K/g)]).
    """
    _check_scale_fmt(scale_fmt)
    m, k = x.shape
    g = group_size
    kg = ceil_div(k, g)
    xp = pad_to_multiple(x.float(), 1, g).view(m, kg, g)
    scale = _scale_from_amax(xp.abs().amax(dim=2), scale_fmt)
    q = (xp / scale[:, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q.view(m, kg * g)[:, :k].contiguous(), scale


def dequantize_act_fp8_group(x_q: torch.Tensor, scale: torch.Tensor, group_size: int = 128) -> torch.Tensor:
    k = x_q.shape[1]
    return x_q.float() * scale.float().repeat_interleave(group_size, 1)[:, :k]


def fp8_block_gemm(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    weight_q: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    block_size: int = 128,
) -> torch.Tensor:
    """y = deq(x_q, x_scale) @ deq(weight_q, weight_scale)^T (+ bias) in float32, cast to out_dtype."""
    x = dequantize_act_fp8_group(x_q, x_scale, block_size)
    w = dequantize_weight_fp8_block(weight_q, weight_scale, block_size)
    y = x @ w.t()
    if bias is not None:
        y = y + bias.float()
    return y.to(out_dtype)


def fp8_block_linear(
    x: torch.Tensor,
    weight_q: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    block_size: int = 128,
    scale_fmt: str | None = None,
) -> torch.Tensor:
    """The whole Fp8BlockLinear forward on a 2-D ``x`` [M, K]: quantize x, block-scaled GEMM."""
    x_q, x_scale = quantize_act_fp8_group(x, block_size, scale_fmt)
    return fp8_block_gemm(x_q, x_scale, weight_q, weight_scale, bias, x.dtype, block_size)
