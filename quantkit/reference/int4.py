"""int4 weight-only format: group-wise affine 4-bit weights, activations in the model dtype.

Weight ``W`` [N, K] is split along K into groups of ``g`` (K must be a multiple of g). Each group
has a scale ``s`` (stored in ``scale_dtype``, normally the model's dtype) and an integer zero-point
``z`` in [0, 15]; codes ``q`` are unsigned 4-bit integers in [0, 15]::

    W[n, k] ≈ (q[n, k] - z[n, k // g]) * s[n, k // g]

Min-max choice of the parameters (the plain rounding; ``quantkit.rounding`` has better ones)::

    asymmetric: lo = min(min(W_grp), 0), hi = max(max(W_grp), 0)
                s = (hi - lo) / 15  (floored at AMAX_EPS, then rounded to scale_dtype)
                z = clamp(round(-lo / s), 0, 15)
    symmetric:  s = max(|W_grp|) / 7.5 (same flooring/rounding),  z = 8
    q = clamp(round_half_even(W / s) + z, 0, 15)

Packed layout (the layer's ``weight_packed``, what checkpoints convert from and to, and what the
Triton kernels read, so nothing is repacked per call): ``uint8 [N, K // 2]``; byte j of row n holds
q[n, 2j] in bits 0-3 and q[n, 2j + 1] in bits 4-7 (least significant nibble first, no interleave).
Read as little-endian int32 words (``packed.view(torch.int32)``, [N, K // 8], when K % 8 == 0),
word w of row n holds q[n, 8w + i] in bits 4i..4i+3: that is compressed-tensors' ``pack-quantized``
int32 layout, and the kernels load 16-byte runs of these words (the reasons for keeping this order
are in notes/int4_weight_only.md). Zero-points are ``uint8 [N, K // g]``, scales ``[N, K // g]``.

The linear layer computes ``y = x @ dequant(W)^T (+ bias)`` with the weight dequantized to float32
and the matmul in float32, cast to the activation dtype.
"""
from __future__ import annotations

import torch

from quantkit.reference.common import AMAX_EPS, div_exact

INT4_MAX_CODE = 15


def _check_groups(k: int, group_size: int) -> None:
    if group_size <= 0 or k % group_size != 0:
        raise ValueError(f"int4: in_features={k} is not a multiple of group_size={group_size}")


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Pack codes ``q`` [N, K] (values 0..15, any integer dtype) into uint8 [N, K // 2]."""
    if q.shape[-1] % 2:
        raise ValueError(f"int4 packing needs an even number of columns, got {q.shape[-1]}")
    q = q.to(torch.uint8)
    return (q[..., 0::2] & 0xF) | ((q[..., 1::2] & 0xF) << 4)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_int4`: uint8 [N, K // 2] -> uint8 codes [N, K]."""
    low = packed & 0xF
    high = (packed >> 4) & 0xF
    return torch.stack((low, high), dim=-1).flatten(-2)


def int4_qparams_minmax(
    weight: torch.Tensor, group_size: int, symmetric: bool, scale_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Min-max (scale [N, K/g] in scale_dtype, zero-point uint8 [N, K/g]) for ``weight`` [N, K]."""
    n, k = weight.shape
    _check_groups(k, group_size)
    w = weight.float().view(n, k // group_size, group_size)
    if symmetric:
        scale = div_exact(w.abs().amax(dim=-1).clamp(min=AMAX_EPS), 7.5).to(scale_dtype)
        zero = torch.full_like(scale, 8, dtype=torch.uint8)
    else:
        lo = w.amin(dim=-1).clamp(max=0)
        hi = w.amax(dim=-1).clamp(min=0)
        scale = div_exact((hi - lo).clamp(min=AMAX_EPS), INT4_MAX_CODE).to(scale_dtype)
        zero = torch.round(-lo / scale.float()).clamp(0, INT4_MAX_CODE).to(torch.uint8)
    return scale, zero


def quantize_int4_with_qparams(
    weight: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group_size: int
) -> torch.Tensor:
    """Codes uint8 [N, K] for ``weight`` given per-group ``scale`` and ``zero``."""
    n, k = weight.shape
    _check_groups(k, group_size)
    w = weight.float().view(n, k // group_size, group_size)
    q = torch.round(w / scale.float()[..., None]) + zero.float()[..., None]
    return q.clamp(0, INT4_MAX_CODE).to(torch.uint8).view(n, k)


def quantize_weight_int4(
    weight: torch.Tensor,
    group_size: int = 128,
    symmetric: bool = False,
    scale_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Min-max int4: ``weight`` [N, K] -> (packed uint8 [N, K/2], scale [N, K/g], zero uint8 [N, K/g])."""
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D [out, in], got shape {tuple(weight.shape)}")
    scale_dtype = scale_dtype or weight.dtype
    scale, zero = int4_qparams_minmax(weight, group_size, symmetric, scale_dtype)
    q = quantize_int4_with_qparams(weight, scale, zero, group_size)
    return pack_int4(q), scale, zero


def dequantize_weight_int4(
    packed: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    group_size: int,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    q = unpack_int4(packed)
    n, k = q.shape
    _check_groups(k, group_size)
    if tuple(scale.shape) != (n, k // group_size) or tuple(zero.shape) != (n, k // group_size):
        raise ValueError(
            f"int4 scale {tuple(scale.shape)} / zero-point {tuple(zero.shape)} do not match weight "
            f"{(n, k)} with group_size {group_size}: expected {(n, k // group_size)}"
        )
    qg = q.view(n, k // group_size, group_size).float() - zero.float()[..., None]
    return (qg * scale.float()[..., None]).view(n, k).to(dtype)


def int4_weight_only_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    bias: torch.Tensor | None = None,
    group_size: int = 128,
) -> torch.Tensor:
    """The whole Int4WeightOnlyLinear forward on a 2-D ``x`` [M, K]."""
    w = dequantize_weight_int4(packed, scale, zero, group_size)
    y = x.float() @ w.t()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)
