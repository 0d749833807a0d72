"""int8 formats: symmetric per-output-channel weights, optional per-token dynamic activations.

Weight ``W`` [N, K]::

    w_scale[n] = max(|W[n, :]|) / 127        (float32, amax floored at AMAX_EPS)
    Wq[n, k]   = clamp(round_half_even(W[n, k] / w_scale[n]), -127, 127)   (int8)

Activations for int8-dynamic (W8A8), per token (row) of ``x`` [M, K], computed at run time::

    x_scale[m] = max(|x[m, :]|) / 127,   xq = clamp(round_half_even(x / x_scale), -127, 127)

int8-dynamic:      acc = xq @ Wq^T exactly in int32;  y = (acc * x_scale[m]) * w_scale[n] (+ bias)
int8-weight-only:  y = (x @ Wq^T) * w_scale[n] (+ bias), x kept in its own dtype, math in float32

Both computed in float32 and cast to the activation dtype. The -128 code is never produced, so the
format is symmetric under negation (and matches vLLM / torchao W8A8 conventions).
"""
from __future__ import annotations

import torch

from quantkit.reference.common import AMAX_EPS, div_exact

INT8_MAX = 127.0


def _quantize_rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    tf = t.float()
    scale = div_exact(tf.abs().amax(dim=-1).clamp(min=AMAX_EPS), INT8_MAX)
    q = torch.round(tf / scale[..., None]).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def quantize_weight_int8_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` [N, K] -> (int8 [N, K], float32 scale [N])."""
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D [out, in], got shape {tuple(weight.shape)}")
    return _quantize_rows(weight)


def dequantize_weight_int8(weight_q: torch.Tensor, scale: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    return (weight_q.float() * scale.float()[:, None]).to(dtype)


def quantize_act_int8_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [M, K] -> (int8 [M, K], float32 scale [M])."""
    return _quantize_rows(x)


def int8_gemm_int32(x_q: torch.Tensor, weight_q: torch.Tensor) -> torch.Tensor:
    """Exact int32 ``x_q @ weight_q^T``.

    Computed in float64, which is exact: each product is at most 127² and any realistic K keeps the
    sum far below 2^53 (and below 2^31, so the int32 result does not overflow for K < 133,000).
    """
    return (x_q.double() @ weight_q.double().t()).to(torch.int32)


def int8_scaled_gemm(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    weight_q: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """y = (int32(x_q @ weight_q^T) * x_scale[:, None]) * weight_scale[None, :] (+ bias)."""
    acc = int8_gemm_int32(x_q, weight_q).float()
    y = acc * x_scale.float()[:, None] * weight_scale.float()[None, :]
    if bias is not None:
        y = y + bias.float()
    return y.to(out_dtype)


def int8_dynamic_linear(
    x: torch.Tensor, weight_q: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """The whole Int8DynamicLinear forward on a 2-D ``x`` [M, K]."""
    x_q, x_scale = quantize_act_int8_per_token(x)
    return int8_scaled_gemm(x_q, x_scale, weight_q, weight_scale, bias, x.dtype)


def int8_weight_only_linear(
    x: torch.Tensor, weight_q: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """The whole Int8WeightOnlyLinear forward on a 2-D ``x`` [M, K]."""
    y = (x.float() @ weight_q.float().t()) * weight_scale.float()[None, :]
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)
