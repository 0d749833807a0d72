"""FP8 block-wise Triton kernels: 1×128 activation groups, 128×128 weight blocks (DeepSeek-V3 layout).

Numerics are those of :mod:`quantkit.reference.fp8_block`, to the bit for codes and scales::

    amax  = max(|v|) over the group / block (float32), floored at AMAX_EPS
    scale = amax / 448                       (IEEE division; ue8m0: rounded up to 2^e on the bits)
    code  = e4m3(clamp(v / scale, -448, 448))  (IEEE division, round to nearest even)
    y[m, n] = sum_kb x_scale[m, kb] * w_scale[n // b, kb] * sum_{k in kb} xq[m, k] * wq[n, k]  (+ bias[n])

Each K block's dot is accumulated in float32 on its own and scaled before it is added to the running
float32 accumulator (DeepSeek's scheme; it also keeps the fp8 tensor-core accumulation accurate).

Kernels
  * ``_act_quant_kernel``   x [M, K] (bf16/fp16/fp32) -> codes [M, K] e4m3 + scales (any strides; the
                            GEMM path writes them K-major, [ceil(K/g), M], so GEMMs load them coalesced).
  * ``_weight_quant_kernel`` / ``_weight_dequant_kernel``: one program per b×b block.
  * ``_gemm_tiled_kernel``  y tile [BLOCK_M, BLOCK_N] = x · Wᵀ, for M ≳ 64: pipelined K loop, grouped
                            launch order, optional TMA loads (sm_90), BLOCK_N = 2b handled as two
                            b-wide halves (each half has one weight scale and keeps its own 64 regs),
                            optional Hopper warp specialization (a TMA producer warp group and two
                            consumer warp groups that scale and multiply out of step); the sweep offers
                            the latter only after ``warp_specialization_works()`` checked it.
  * ``_gemm_skinny_kernel`` "swap AB" for decode sizes: yᵀ tile [BLOCK_W, BLOCK_X] = W · xᵀ, so the
                            weight rows fill the MMA's M side (≥ 16) and BLOCK_X ≥ 16 covers M = 1..16;
                            small BLOCK_W gives many programs streaming the weight, no split-K.
  Both GEMMs can quantize the activation tile in registers inside the K loop (``fuse_act_quant``):
  no extra launch and no fp8 round trip through memory, but every N-tile program redoes it, so it
  pays only where N / tile is small relative to the weight traffic (decode); otherwise
  ``_act_quant_kernel`` runs first. ``linear`` picks per problem from the config.

The activation quantizers divide with ``_div_exact`` (reciprocal, multiply and two fused-multiply-add
corrections: Markstein's theorem makes the result the correctly rounded quotient) instead of the
dearer ``div_rn``, on the GPU (tested bit-exact there); under the interpreter, whose fma is not
fused, they use ``div_rn``.

Layouts: x [M, K] with unit stride along K; weight codes [N, K] contiguous e4m3; weight scales
float32 [ceil(N/b), ceil(K/b)] (any strides); bias [N]; y [M, N] contiguous in x's dtype (``gemm``:
``out_dtype``). N, K need not be multiples of b or of any tile: edges are masked (masked lanes load 0,
which cannot raise an amax). Limits: b a power of two in [16, 256]; non-finite inputs give
non-finite outputs but not necessarily the reference's pattern of NaNs.
"""
from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from quantkit.reference.common import AMAX_EPS, ceil_div

MIN_CAPABILITY = (8, 9)  # e4m3 conversions and fp8 MMA need Ada or Hopper

FP8_DTYPE = torch.float8_e4m3fn
_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)

_EPS = tl.constexpr(AMAX_EPS)
_FP8_MAX = tl.constexpr(448.0)
# Read once, as Triton itself reads it when the kernels below are decorated.
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _loop_bound(k: int):
    """K as the GEMMs receive it: under the interpreter (triton 3.6, numpy >= 2.4) a runtime integer
    argument is a 1-element array that ``range()`` rejects, so there K goes in as a constexpr."""
    return tl.constexpr(k) if _INTERPRET else k


# ============================================================================ device helpers
@triton.jit
def _scale_from_amax(amax, UE8M0: tl.constexpr):
    scale = tl.math.div_rn(tl.maximum(amax, _EPS), tl.full(amax.shape, _FP8_MAX, tl.float32))
    if UE8M0:
        # Round up to a power of two on the float32 bits, exactly as the reference does.
        bits = scale.to(tl.int32, bitcast=True)
        exponent = bits & 0x7F800000
        rounded = tl.where((bits & 0x007FFFFF) != 0, exponent + 0x00800000, exponent)
        scale = rounded.to(tl.float32, bitcast=True)
    return scale


@triton.jit
def _div_exact(x, scale, ON_GPU: tl.constexpr):
    """x [R, C] / scale [R] (per row), the correctly rounded float32 quotient. ON_GPU: compiled (fused
    fma); the interpreter's fma is a separate multiply and add, so it divides with div_rn."""
    if ON_GPU:
        # r = RN(1/s), q0 = RN(x·r) is within 1.5 ulp of x/s; one fma correction q1 = q0 + (x − s·q0)·r
        # makes it faithful (within 1 ulp), and then Markstein's theorem makes the second correction
        # exact: its residual x − s·q1 is exact in the fma and RN(q1 + residual·r) = RN(x/s), barring
        # underflow. The AMAX_EPS floor keeps s ≥ 2^-49, so every x whose quotient could round to a
        # nonzero code (|x/s| ≥ 2^-11) has |x| ≥ 2^-60 and normal residuals (≈ |x|·2^-24); smaller
        # quotients give a zero code anyway. |q| ≤ 448 and r ≤ 2^49: nothing overflows.
        s = scale[:, None]
        r = tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)[:, None]
        q0 = x * r
        q1 = tl.fma(tl.fma(-q0, s, x), r, q0)
        q = tl.fma(tl.fma(-q1, s, x), r, q1)
        q = tl.where(q0 == 0.0, q0, q)  # keep the sign of a zero (−0/s is −0)
    else:
        q = tl.math.div_rn(x, tl.broadcast_to(scale[:, None], x.shape))
    return q


@triton.jit
def _quantize_rows(x, UE8M0: tl.constexpr, ON_GPU: tl.constexpr):
    """x [R, G] float32 (one group per row) -> (e4m3 codes [R, G], scales [R])."""
    scale = _scale_from_amax(tl.max(tl.abs(x), axis=1), UE8M0)
    q = _div_exact(x, scale, ON_GPU)
    if not ON_GPU:
        # On the GPU the conversion is cvt.rn.satfinite, which saturates at ±448 by itself: the
        # reference's clamp changes nothing there (|q| ≤ 448·(1 + 2^-23) rounds to 448 either way).
        q = tl.minimum(tl.maximum(q, -_FP8_MAX), _FP8_MAX)
    return q.to(tl.float8e4nv), scale


# ============================================================================ quantizers
@triton.jit
def _act_quant_kernel(x_ptr, q_ptr, s_ptr, M, K, stride_xm, stride_qm, stride_sm, stride_sg,
                      BLOCK_M: tl.constexpr, GROUP: tl.constexpr, UE8M0: tl.constexpr,
                      ON_GPU: tl.constexpr):
    """One program: BLOCK_M rows × one group of GROUP columns."""
    pid_m = tl.program_id(0)
    g = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = g * GROUP + tl.arange(0, GROUP)
    mask = (offs_m[:, None] < M) & (offs_k[None, :] < K)
    x = tl.load(x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :], mask=mask, other=0.0)
    q, scale = _quantize_rows(x.to(tl.float32), UE8M0, ON_GPU)
    tl.store(q_ptr + offs_m[:, None].to(tl.int64) * stride_qm + offs_k[None, :], q, mask=mask)
    tl.store(s_ptr + offs_m * stride_sm + g * stride_sg, scale, mask=offs_m < M)


@triton.jit
def _weight_quant_kernel(w_ptr, q_ptr, s_ptr, N, K, stride_wn, stride_qn, stride_sn, stride_sk,
                         BLOCK: tl.constexpr, ROWS: tl.constexpr, UE8M0: tl.constexpr):
    """One program per BLOCK×BLOCK block, in row chunks of ROWS (pass 1: amax, pass 2: codes)."""
    nb = tl.program_id(0)
    kb = tl.program_id(1)
    offs_k = kb * BLOCK + tl.arange(0, BLOCK)
    mask_k = offs_k < K
    amax = tl.zeros([ROWS], dtype=tl.float32)
    for r in tl.static_range(0, BLOCK, ROWS):
        offs_n = nb * BLOCK + r + tl.arange(0, ROWS)
        mask = (offs_n[:, None] < N) & mask_k[None, :]
        w = tl.load(w_ptr + offs_n[:, None].to(tl.int64) * stride_wn + offs_k[None, :], mask=mask, other=0.0)
        amax = tl.maximum(amax, tl.max(tl.abs(w.to(tl.float32)), axis=1))
    rows = tl.arange(0, ROWS)
    # The block's amax in every lane (kept as a vector: the helpers work on rows).
    scale_rows = _scale_from_amax(tl.zeros([ROWS], dtype=tl.float32) + tl.max(amax, axis=0), UE8M0)
    tl.store(s_ptr + nb * stride_sn + kb * stride_sk + rows * 0, scale_rows, mask=rows == 0)
    for r in tl.static_range(0, BLOCK, ROWS):
        offs_n = nb * BLOCK + r + tl.arange(0, ROWS)
        mask = (offs_n[:, None] < N) & mask_k[None, :]
        w = tl.load(w_ptr + offs_n[:, None].to(tl.int64) * stride_wn + offs_k[None, :], mask=mask, other=0.0)
        q = _div_exact(w.to(tl.float32), scale_rows, False)
        q = tl.minimum(tl.maximum(q, -_FP8_MAX), _FP8_MAX)
        tl.store(q_ptr + offs_n[:, None].to(tl.int64) * stride_qn + offs_k[None, :], q.to(tl.float8e4nv), mask=mask)


@triton.jit
def _weight_dequant_kernel(q_ptr, s_ptr, w_ptr, N, K, stride_qn, stride_sn, stride_sk, stride_wn,
                           BLOCK: tl.constexpr, ROWS: tl.constexpr):
    nb = tl.program_id(0)
    kb = tl.program_id(1)
    offs_k = kb * BLOCK + tl.arange(0, BLOCK)
    scale = tl.load(s_ptr + nb * stride_sn + kb * stride_sk)
    for r in tl.static_range(0, BLOCK, ROWS):
        offs_n = nb * BLOCK + r + tl.arange(0, ROWS)
        mask = (offs_n[:, None] < N) & (offs_k[None, :] < K)
        q = tl.load(q_ptr + offs_n[:, None].to(tl.int64) * stride_qn + offs_k[None, :], mask=mask, other=0.0)
        w = q.to(tl.float32) * scale
        tl.store(w_ptr + offs_n[:, None].to(tl.int64) * stride_wn + offs_k[None, :],
                 w.to(w_ptr.dtype.element_ty), mask=mask)


# ============================================================================ GEMMs
@triton.jit
def _load_act_tile(x_ptr, xs_ptr, offs_m, offs_k, kb, M, K, stride_xm, stride_xsm, stride_xsk,
                   FUSE: tl.constexpr, EVEN_K: tl.constexpr, UE8M0: tl.constexpr, ON_GPU: tl.constexpr):
    """Rows offs_m of the activation's K block kb as (e4m3 [R, BK], scale [R]); quantized here if FUSE."""
    mask_m = offs_m < M
    if EVEN_K:
        mask = mask_m[:, None]
    else:
        mask = mask_m[:, None] & (offs_k[None, :] < K)
    ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :]
    if FUSE:
        x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
        a, a_s = _quantize_rows(x, UE8M0, ON_GPU)
    else:
        a = tl.load(ptrs, mask=mask, other=0.0)
        a_s = tl.load(xs_ptr + offs_m * stride_xsm + kb * stride_xsk, mask=mask_m, other=0.0)
    return a, a_s


@triton.jit
def _gemm_tiled_kernel(
    x_ptr, x_desc, xs_ptr, w_ptr, w_desc, ws_ptr, bias_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_xsm, stride_xsk, stride_wn, stride_wsn, stride_wsk, stride_ym,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    FUSE: tl.constexpr, USE_TMA: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr,
    UE8M0: tl.constexpr, ON_GPU: tl.constexpr, WARP_SPEC: tl.constexpr,
):
    """y[BLOCK_M, BLOCK_N] tile; BLOCK_K == the quantization block b. BLOCK_N ≤ b (one weight scale
    per tile) or BLOCK_N == 2b (two halves, each with its own accumulator and scale)."""
    TWO_HALVES: tl.constexpr = BLOCK_N == 2 * BLOCK_K
    BN: tl.constexpr = BLOCK_N // 2 if TWO_HALVES else BLOCK_N  # rows of W per dot
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # Grouped order: GROUP_M row-tiles sweep the N tiles together, so their W tiles are L2 hits.
    per_group = GROUP_M * num_pid_n
    first_m = (pid // per_group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n0 = pid_n * BLOCK_N + tl.arange(0, BN)
    offs_n1 = offs_n0 + BN
    offs_kk = tl.arange(0, BLOCK_K)
    mask_n0 = offs_n0 < N
    mask_n1 = offs_n1 < N
    w_ptrs0 = w_ptr + offs_n0[:, None].to(tl.int64) * stride_wn + offs_kk[None, :]
    w_ptrs1 = w_ptr + offs_n1[:, None].to(tl.int64) * stride_wn + offs_kk[None, :]
    ws_ptr0 = ws_ptr + ((pid_n * BLOCK_N) // BLOCK_K) * stride_wsn
    ws_ptr1 = ws_ptr0 + stride_wsn  # only read when TWO_HALVES, and only for an existing block

    acc0 = tl.zeros([BLOCK_M, BN], dtype=tl.float32)
    acc1 = tl.zeros([BLOCK_M, BN], dtype=tl.float32)
    for k0 in tl.range(0, K, BLOCK_K, warp_specialize=WARP_SPEC):
        kb = k0 // BLOCK_K
        offs_k = k0 + offs_kk
        if USE_TMA and not FUSE:
            a = x_desc.load([pid_m * BLOCK_M, k0])
            a_s = tl.load(xs_ptr + offs_m * stride_xsm + kb * stride_xsk, mask=offs_m < M, other=0.0)
        else:
            a, a_s = _load_act_tile(x_ptr, xs_ptr, offs_m, offs_k, kb, M, K, stride_xm, stride_xsm, stride_xsk,
                                    FUSE, EVEN_K, UE8M0, ON_GPU)
        w_s0 = tl.load(ws_ptr0 + kb * stride_wsk)
        if USE_TMA:
            b0 = w_desc.load([pid_n * BLOCK_N, k0])
        elif EVEN_K:
            b0 = tl.load(w_ptrs0 + k0, mask=mask_n0[:, None], other=0.0)
        else:
            b0 = tl.load(w_ptrs0 + k0, mask=mask_n0[:, None] & (offs_k[None, :] < K), other=0.0)
        p0 = tl.dot(a, b0.T)
        acc0 = tl.fma(p0, (a_s * w_s0)[:, None], acc0)
        if TWO_HALVES:
            w_s1 = tl.load(ws_ptr1 + kb * stride_wsk, mask=pid_n * BLOCK_N + BN < N, other=0.0)
            if USE_TMA:
                b1 = w_desc.load([pid_n * BLOCK_N + BN, k0])
            elif EVEN_K:
                b1 = tl.load(w_ptrs1 + k0, mask=mask_n1[:, None], other=0.0)
            else:
                b1 = tl.load(w_ptrs1 + k0, mask=mask_n1[:, None] & (offs_k[None, :] < K), other=0.0)
            p1 = tl.dot(a, b1.T)
            acc1 = tl.fma(p1, (a_s * w_s1)[:, None], acc1)

    mask_m = offs_m < M
    y_rows = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym
    if HAS_BIAS:
        acc0 += tl.load(bias_ptr + offs_n0, mask=mask_n0, other=0.0).to(tl.float32)[None, :]
    tl.store(y_rows + offs_n0[None, :], acc0.to(y_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n0[None, :])
    if TWO_HALVES:
        if HAS_BIAS:
            acc1 += tl.load(bias_ptr + offs_n1, mask=mask_n1, other=0.0).to(tl.float32)[None, :]
        tl.store(y_rows + offs_n1[None, :], acc1.to(y_ptr.dtype.element_ty),
                 mask=mask_m[:, None] & mask_n1[None, :])


@triton.jit
def _gemm_skinny_kernel(
    x_ptr, xs_ptr, w_ptr, ws_ptr, bias_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_xsm, stride_xsk, stride_wn, stride_wsn, stride_wsk, stride_ym,
    BLOCK_W: tl.constexpr, BLOCK_X: tl.constexpr, BLOCK_K: tl.constexpr,
    FUSE: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr,
    UE8M0: tl.constexpr, ON_GPU: tl.constexpr,
):
    """yᵀ[BLOCK_W, BLOCK_X] = W[BLOCK_W, K] · x[BLOCK_X, K]ᵀ; BLOCK_W divides b (one weight scale)."""
    pid_w = tl.program_id(0)
    pid_x = tl.program_id(1)
    offs_w = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    offs_x = pid_x * BLOCK_X + tl.arange(0, BLOCK_X)
    offs_kk = tl.arange(0, BLOCK_K)
    mask_w = offs_w < N
    w_ptrs = w_ptr + offs_w[:, None].to(tl.int64) * stride_wn + offs_kk[None, :]
    ws_row = ws_ptr + ((pid_w * BLOCK_W) // BLOCK_K) * stride_wsn

    acc = tl.zeros([BLOCK_W, BLOCK_X], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kb = k0 // BLOCK_K
        offs_k = k0 + offs_kk
        xq, x_s = _load_act_tile(x_ptr, xs_ptr, offs_x, offs_k, kb, M, K, stride_xm, stride_xsm, stride_xsk,
                                 FUSE, EVEN_K, UE8M0, ON_GPU)
        w_s = tl.load(ws_row + kb * stride_wsk)
        if EVEN_K:
            w = tl.load(w_ptrs + k0, mask=mask_w[:, None], other=0.0)
        else:
            w = tl.load(w_ptrs + k0, mask=mask_w[:, None] & (offs_k[None, :] < K), other=0.0)
        p = tl.dot(w, xq.T)
        acc = tl.fma(p, (x_s * w_s)[None, :], acc)

    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_w, mask=mask_w, other=0.0).to(tl.float32)[:, None]
    y_ptrs = y_ptr + offs_x[None, :].to(tl.int64) * stride_ym + offs_w[:, None]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask_w[:, None] & (offs_x[None, :] < M))


# ============================================================================ host side
def _check_block_size(block_size: int) -> None:
    if not isinstance(block_size, int) or block_size < 16 or block_size > 256 or block_size & (block_size - 1):
        raise ValueError(f"fp8_block kernels need block_size a power of two in [16, 256], got {block_size!r} "
                         f"(QUANTKIT_BACKEND=reference runs any block size)")


def _check_scale_fmt(scale_fmt) -> bool:
    if scale_fmt not in (None, "ue8m0"):
        raise ValueError(f"scale_fmt must be None or 'ue8m0', got {scale_fmt!r}")
    return scale_fmt == "ue8m0"


def _check_2d(t: torch.Tensor, name: str, dtypes, unit_last_stride: bool = True) -> None:
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype in {[str(d) for d in dtypes]}, got {t.dtype}")
    if unit_last_stride and t.shape[1] > 1 and t.stride(1) != 1:
        raise ValueError(f"{name} must have unit stride along its last dimension (call .contiguous()), "
                         f"got strides {t.stride()}")


def _check_weight(weight_q: torch.Tensor, weight_scale: torch.Tensor, block_size: int, k: int | None) -> None:
    _check_2d(weight_q, "weight_q", (FP8_DTYPE,))
    if not weight_q.is_contiguous():
        raise ValueError(f"weight_q must be contiguous, got strides {weight_q.stride()} for shape "
                         f"{tuple(weight_q.shape)}")
    n, kw = weight_q.shape
    if k is not None and kw != k:
        raise ValueError(f"weight_q has {kw} input features but x has {k}")
    expected = (ceil_div(n, block_size), ceil_div(kw, block_size))
    if weight_scale.dtype != torch.float32 or tuple(weight_scale.shape) != expected:
        raise ValueError(f"weight_scale must be float32 of shape {expected} for weight {(n, kw)} and block size "
                         f"{block_size}, got {weight_scale.dtype} {tuple(weight_scale.shape)}")
    if weight_scale.device != weight_q.device:
        raise ValueError(f"weight_scale is on {weight_scale.device} but weight_q on {weight_q.device}")


def _check_bias(bias, n: int, device) -> None:
    if bias is None:
        return
    if bias.dim() != 1 or bias.shape[0] != n or not bias.is_contiguous():
        raise ValueError(f"bias must be a contiguous vector of {n} elements, got shape {tuple(bias.shape)}, "
                         f"strides {bias.stride()}")
    if bias.dtype not in _FLOAT_DTYPES or bias.device != device:
        raise ValueError(f"bias must be bf16/fp16/fp32 on {device}, got {bias.dtype} on {bias.device}")


def _on_gpu(t: torch.Tensor) -> bool:
    """Compiled kernels (not the interpreter): fused fma and a saturating e4m3 conversion."""
    return t.is_cuda


@functools.lru_cache(maxsize=None)
def _has_tma(index: int) -> bool:
    return torch.cuda.get_device_capability(index) >= (9, 0)


def _tma_usable(t: torch.Tensor) -> bool:
    """Host-built TMA descriptors: sm_90+, 16-byte aligned base and row stride (or the interpreter)."""
    if t.is_cuda and not _has_tma(t.device.index if t.device.index is not None else torch.cuda.current_device()):
        return False
    return t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0 and t.stride(1) == 1


# ---------------------------------------------------------------------------- quantizers
def quantize_act(x: torch.Tensor, group_size: int = 128, scale_fmt: str | None = None):
    """x [M, K] bf16/fp16/fp32 -> (e4m3 [M, K], float32 scales [M, ceil(K/g)]), bit-exact with the reference."""
    _check_block_size(group_size)
    ue8m0 = _check_scale_fmt(scale_fmt)
    _check_2d(x, "x", _FLOAT_DTYPES)
    m, k = x.shape
    q = torch.empty(m, k, dtype=FP8_DTYPE, device=x.device)
    s = torch.empty(m, ceil_div(k, group_size), dtype=torch.float32, device=x.device)
    _launch_act_quant(x, q, s, s.stride(0), s.stride(1), group_size, ue8m0)
    return q, s


def _launch_act_quant(x, q, s, stride_sm, stride_sg, group, ue8m0) -> None:
    m, k = x.shape
    if m == 0 or k == 0:
        return
    # Big inputs: 64 elements per thread (SASS ~17 instructions per element, under the ~28 that
    # 3 TB/s at 3 bytes per element leaves); smaller tiles while that would leave SMs idle.
    groups = triton.cdiv(k, group)
    block_m = max(1, min(triton.next_power_of_2(m), 8192 // group))
    while x.is_cuda and block_m > 1 and triton.cdiv(m, block_m) * groups < 256:
        block_m //= 2
    grid = (triton.cdiv(m, block_m), groups)
    _act_quant_kernel[grid](x, q, s, m, k, x.stride(0), q.stride(0), stride_sm, stride_sg,
                            BLOCK_M=block_m, GROUP=group, UE8M0=ue8m0, ON_GPU=_on_gpu(x), num_warps=4)


def quantize_weight(weight: torch.Tensor, block_size: int = 128, scale_fmt: str | None = None):
    """weight [N, K] -> (e4m3 [N, K], float32 scales [ceil(N/b), ceil(K/b)]), bit-exact with the reference."""
    _check_block_size(block_size)
    ue8m0 = _check_scale_fmt(scale_fmt)
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D [out, in], got shape {tuple(weight.shape)}")
    if weight.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"weight must be bf16/fp16/fp32, got {weight.dtype}")
    if weight.shape[1] > 1 and weight.stride(1) != 1:
        weight = weight.contiguous()
    n, k = weight.shape
    q = torch.empty(n, k, dtype=FP8_DTYPE, device=weight.device)
    s = torch.empty(ceil_div(n, block_size), ceil_div(k, block_size), dtype=torch.float32, device=weight.device)
    if n and k:
        rows = max(1, min(block_size, 4096 // block_size))
        _weight_quant_kernel[(s.shape[0], s.shape[1])](weight, q, s, n, k, weight.stride(0), q.stride(0),
                                                       s.stride(0), s.stride(1), BLOCK=block_size, ROWS=rows,
                                                       UE8M0=ue8m0, num_warps=4)
    return q, s


def dequantize_weight(weight_q: torch.Tensor, scale: torch.Tensor, block_size: int = 128, dtype=torch.float32):
    """(e4m3 [N, K], scales) -> weight [N, K] in ``dtype`` (codes × block scale, rounded once)."""
    _check_block_size(block_size)
    _check_weight(weight_q, scale, block_size, None)
    if dtype not in _FLOAT_DTYPES:
        raise TypeError(f"dtype must be bf16/fp16/fp32, got {dtype}")
    n, k = weight_q.shape
    w = torch.empty(n, k, dtype=dtype, device=weight_q.device)
    if n and k:
        rows = max(1, min(block_size, 4096 // block_size))
        _weight_dequant_kernel[(scale.shape[0], scale.shape[1])](weight_q, scale, w, n, k, weight_q.stride(0),
                                                                 scale.stride(0), scale.stride(1), w.stride(0),
                                                                 BLOCK=block_size, ROWS=rows, num_warps=4)
    return w


# ---------------------------------------------------------------------------- configs
# A config says which GEMM runs and how:
#   {"kernel": "skinny", "BLOCK_W", "BLOCK_X", "num_warps", "num_stages", "fuse_act_quant"}
#   {"kernel": "tiled", "BLOCK_M", "BLOCK_N", "GROUP_M", "num_warps", "num_stages", "fuse_act_quant", "tma",
#    "warp_specialize"}
# warp_specialize (sm_90, TMA only) lets Triton split the CTA into a TMA producer warp group and two
# consumer warp groups (num_warps=4 becomes 12 warps) that run their MMA / scaling phases out of step.
_CONFIG_KEYS = {
    "skinny": {"BLOCK_W", "BLOCK_X", "num_warps", "num_stages", "fuse_act_quant"},
    "tiled": {"BLOCK_M", "BLOCK_N", "GROUP_M", "num_warps", "num_stages", "fuse_act_quant", "tma",
              "warp_specialize"},
}


def _skinny(bw, bx, warps, stages, fuse) -> dict:
    return {"kernel": "skinny", "BLOCK_W": bw, "BLOCK_X": bx, "num_warps": warps, "num_stages": stages,
            "fuse_act_quant": fuse}


def _tiled(bm, bn, warps, stages, tma, fuse=False, ws=False, group_m=8) -> dict:
    return {"kernel": "tiled", "BLOCK_M": bm, "BLOCK_N": bn, "GROUP_M": group_m, "num_warps": warps,
            "num_stages": stages, "fuse_act_quant": fuse, "tma": tma, "warp_specialize": ws}


def default_config(M: int, N: int, K: int) -> dict:
    """A sound choice without tuning (notes/fp8_block.md gives the reasoning)."""
    if M <= 16:
        return _skinny(64, 16, 4, 6, True)
    if M <= 64:
        return _skinny(64, 32 if M <= 32 else 64, 4, 5, False)
    if M <= 256:
        return _tiled(64, 128, 4, 4, True)
    return _tiled(128, 128, 8, 4, True)


def candidate_configs(M: int, N: int, K: int) -> list[dict]:
    """The search space for the offline sweep: ≤ 8 per problem, ≤ 24 distinct over the benchmark cells.
    Warp-specialized configs are offered only where :func:`warp_specialization_works`."""
    if M <= 16:
        return [_skinny(32, 16, 4, 6, True), _skinny(64, 16, 4, 6, True), _skinny(64, 16, 4, 8, True),
                _skinny(32, 16, 4, 6, False), _skinny(64, 16, 4, 6, False), _skinny(64, 16, 4, 8, False),
                _skinny(128, 16, 4, 4, False)]
    if M <= 64:
        bx = 32 if M <= 32 else 64
        return [_skinny(32, bx, 4, 5, False), _skinny(64, bx, 4, 5, False), _skinny(128, bx, 4, 4, False),
                _skinny(64, bx, 4, 5, True), _tiled(64, 64, 4, 5, True), _tiled(64, 128, 4, 4, True)]
    if M <= 256:
        configs = [_tiled(64, 64, 4, 5, True), _tiled(64, 128, 4, 4, True), _tiled(128, 64, 4, 4, True),
                   _tiled(128, 128, 8, 4, True), _tiled(64, 128, 4, 4, False, fuse=True)]
    else:
        configs = [_tiled(128, 128, 8, 4, True), _tiled(128, 128, 8, 3, True), _tiled(128, 256, 8, 3, True),
                   _tiled(64, 256, 8, 4, True)]
    if warp_specialization_works():
        configs += _WS_CONFIGS_MID if M <= 256 else _WS_CONFIGS_LARGE
    return configs


_WS_CONFIGS_MID = [_tiled(64, 128, 4, 4, True, ws=True), _tiled(128, 128, 4, 4, True, ws=True)]
_WS_CONFIGS_LARGE = [_tiled(128, 128, 4, 4, True, ws=True), _tiled(128, 128, 4, 5, True, ws=True),
                     _tiled(128, 256, 4, 3, True, ws=True), _tiled(128, 128, 4, 4, True, ws=True, group_m=16)]


@functools.lru_cache(maxsize=None)
def warp_specialization_works() -> bool:
    """Whether the warp-specialized GEMMs run, and agree with the plain ones, on this machine.

    Triton's Hopper warp specialization is young: a miscompile could hang or give wrong numbers, so
    before the sweep (or autotuning) offers those configs, a child process runs each of them once
    with a timeout and compares with the 8-warp kernel. Without a GPU there is nothing to protect."""
    if not torch.cuda.is_available():
        return True
    if not _has_tma(torch.cuda.current_device()):
        return False
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    code = "from quantkit.kernels.fp8_block import _probe_warp_specialization as p; p()"
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)
        why = "" if done.returncode == 0 and done.stdout.strip().endswith("ok") else \
            f"exit {done.returncode}: {(done.stdout + done.stderr)[-1500:]}"
    except subprocess.TimeoutExpired:
        why = "no answer in 180 s"
    if why:
        logging.getLogger("quantkit").warning("fp8_block: warp-specialized GEMMs left out of tuning (%s)", why)
    return not why


def _probe_warp_specialization() -> None:
    # Shapes specialize like the sweep's (M, N, K multiples of 16, K of 128, no bias), so the sweep
    # finds these compilations in Triton's cache.
    torch.manual_seed(0)
    m, n, k = 1024, 2048, 2048
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    weight_q, weight_scale = quantize_weight(torch.randn(n, k, device="cuda") * 0.02)
    for config in _WS_CONFIGS_MID + _WS_CONFIGS_LARGE:
        y = linear(x, weight_q, weight_scale, config=config)
        plain = linear(x, weight_q, weight_scale, config=dict(config, warp_specialize=False, num_warps=8))
        torch.cuda.synchronize()
        err = ((y.float() - plain.float()).norm() / plain.float().norm()).item()
        if not err <= 1e-3:
            raise SystemExit(f"warp-specialized {config} differs from the plain kernel: {err:.3g}")
    print("ok")


def _check_config(config: dict, block_size: int) -> None:
    kind = config.get("kernel")
    if kind not in _CONFIG_KEYS:
        raise ValueError(f"fp8_block config needs 'kernel' in {sorted(_CONFIG_KEYS)}, got {config!r}")
    missing = _CONFIG_KEYS[kind] - set(config)
    if missing:
        raise ValueError(f"fp8_block {kind} config is missing {sorted(missing)}: {config!r}")
    if kind == "skinny":
        bw, bx = config["BLOCK_W"], config["BLOCK_X"]
        if bw < 16 or block_size % bw or bx < 16 or bx & (bx - 1):
            raise ValueError(f"skinny config needs BLOCK_W a power of two in [16, block_size={block_size}] and "
                             f"BLOCK_X a power of two ≥ 16: {config!r}")
    else:
        bm, bn = config["BLOCK_M"], config["BLOCK_N"]
        if bm < 16 or bm & (bm - 1) or bn < 16 or not (block_size % bn == 0 or bn == 2 * block_size):
            raise ValueError(f"tiled config needs BLOCK_M a power of two ≥ 16 and BLOCK_N dividing block_size="
                             f"{block_size} or equal to 2·block_size: {config!r}")


def make_bench_inputs(N: int, K: int, dtype=torch.bfloat16) -> tuple:
    """Every positional argument of ``linear`` after x, for a layer of weights ~ N(0, 0.02²)."""
    w = (torch.randn(N, K, device="cuda") * 0.02).to(dtype)
    weight_q, weight_scale = quantize_weight(w)
    return weight_q, weight_scale, None, 128, None


# ---------------------------------------------------------------------------- GEMM launchers
def _run_gemm(x, xs, stride_xsm, stride_xsk, weight_q, weight_scale, bias, y, block_size, config, fuse, ue8m0):
    m, k = x.shape
    n = weight_q.shape[0]
    even_k = k % block_size == 0
    has_bias = bias is not None
    bias_arg = bias if has_bias else y  # never read when HAS_BIAS is False
    xs_arg = xs if xs is not None else y
    on_gpu = _on_gpu(x)
    if config["kernel"] == "skinny":
        bw, bx = config["BLOCK_W"], config["BLOCK_X"]
        grid = (triton.cdiv(n, bw), triton.cdiv(m, bx))
        _gemm_skinny_kernel[grid](
            x, xs_arg, weight_q, weight_scale, bias_arg, y, m, n, _loop_bound(k),
            x.stride(0), stride_xsm, stride_xsk, weight_q.stride(0), weight_scale.stride(0), weight_scale.stride(1),
            y.stride(0),
            BLOCK_W=bw, BLOCK_X=bx, BLOCK_K=block_size, FUSE=fuse, HAS_BIAS=has_bias, EVEN_K=even_k,
            UE8M0=ue8m0, ON_GPU=on_gpu, num_warps=config["num_warps"], num_stages=config["num_stages"])
        return y
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    warps = config["num_warps"]
    use_tma = bool(config["tma"]) and _tma_usable(weight_q) and (fuse or _tma_usable(x))
    # Triton's Hopper warp specialization only handles TMA-fed loops (it aborts the process otherwise).
    warp_spec = bool(config["warp_specialize"]) and use_tma and not fuse
    if config["warp_specialize"] and not warp_spec:
        warps = max(warps, 8)  # two warp groups, as the specialized kernel's consumers would have been
    x_desc = w_desc = None
    if use_tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        w_desc = TensorDescriptor.from_tensor(weight_q, [bn // 2 if bn == 2 * block_size else bn, block_size])
        if not fuse:
            x_desc = TensorDescriptor.from_tensor(x, [bm, block_size])
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    _gemm_tiled_kernel[grid](
        x, x_desc, xs_arg, weight_q, w_desc, weight_scale, bias_arg, y, m, n, _loop_bound(k),
        x.stride(0), stride_xsm, stride_xsk, weight_q.stride(0), weight_scale.stride(0), weight_scale.stride(1),
        y.stride(0),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=block_size, GROUP_M=config["GROUP_M"], FUSE=fuse, USE_TMA=use_tma,
        HAS_BIAS=has_bias, EVEN_K=even_k, UE8M0=ue8m0, ON_GPU=on_gpu, WARP_SPEC=warp_spec,
        num_warps=warps, num_stages=config["num_stages"])
    return y


def _tuned_config(t: torch.Tensor, m: int, n: int, k: int, bench) -> dict:
    if not t.is_cuda:  # the interpreter: tuned tables are per GPU
        return default_config(m, n, k)
    from quantkit.kernels.tuning import get_config

    return get_config("fp8_block", m, n, k, module=sys.modules[__name__], bench=bench)


def gemm(x_q: torch.Tensor, x_scale: torch.Tensor, weight_q: torch.Tensor, weight_scale: torch.Tensor,
         bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16, block_size: int = 128, *,
         config: dict | None = None):
    """y = deq(x_q, x_scale) · deq(weight_q, weight_scale)ᵀ (+ bias), float32 accumulation, in ``out_dtype``.

    ``config`` picks the kernel as for ``linear`` (its ``fuse_act_quant`` is ignored: x is quantized)."""
    _check_block_size(block_size)
    _check_2d(x_q, "x_q", (FP8_DTYPE,))
    m, k = x_q.shape
    _check_weight(weight_q, weight_scale, block_size, k)
    n = weight_q.shape[0]
    if weight_q.device != x_q.device or x_scale.device != x_q.device:
        raise ValueError(f"x_q is on {x_q.device}, x_scale on {x_scale.device}, weight_q on {weight_q.device}")
    if x_scale.dtype != torch.float32 or tuple(x_scale.shape) != (m, ceil_div(k, block_size)):
        raise ValueError(f"x_scale must be float32 of shape {(m, ceil_div(k, block_size))}, got "
                         f"{x_scale.dtype} {tuple(x_scale.shape)}")
    _check_bias(bias, n, x_q.device)
    if out_dtype not in _FLOAT_DTYPES:
        raise TypeError(f"out_dtype must be bf16/fp16/fp32, got {out_dtype}")
    y = torch.empty(m, n, dtype=out_dtype, device=x_q.device)
    if m == 0 or n == 0:
        return y
    config = dict(config if config is not None else _tuned_config(x_q, m, n, k, None), fuse_act_quant=False)
    _check_config(config, block_size)
    return _run_gemm(x_q, x_scale, x_scale.stride(0), x_scale.stride(1), weight_q, weight_scale, bias, y,
                     block_size, config, False, False)


def linear(x: torch.Tensor, weight_q: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None = None,
           block_size: int = 128, scale_fmt: str | None = None, *, config: dict | None = None) -> torch.Tensor:
    """The Fp8BlockLinear forward on x [M, K]: quantize x per 1×b group, block-scaled GEMM, bias; y in x.dtype."""
    _check_block_size(block_size)
    ue8m0 = _check_scale_fmt(scale_fmt)
    _check_2d(x, "x", _FLOAT_DTYPES)
    m, k = x.shape
    _check_weight(weight_q, weight_scale, block_size, k)
    n = weight_q.shape[0]
    _check_bias(bias, n, x.device)
    if weight_q.device != x.device:
        raise ValueError(f"x is on {x.device} but weight_q on {weight_q.device}")
    if config is None:
        config = _tuned_config(x, m, n, k, functools.partial(_bench_config, x, weight_q, weight_scale, bias,
                                                          block_size, scale_fmt))
    _check_config(config, block_size)
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    if config["fuse_act_quant"]:
        return _run_gemm(x, None, 0, 0, weight_q, weight_scale, bias, y, block_size, config, True, ue8m0)
    # Scales K-major ([ceil(K/b), M]): the GEMMs read one K block's scales for a row tile coalesced.
    x_q = torch.empty(m, k, dtype=FP8_DTYPE, device=x.device)
    x_s = torch.empty(ceil_div(k, block_size), m, dtype=torch.float32, device=x.device)
    _launch_act_quant(x, x_q, x_s, 1, m, block_size, ue8m0)
    return _run_gemm(x_q, x_s, 1, m, weight_q, weight_scale, bias, y, block_size, config, False, ue8m0)


def _bench_config(x, weight_q, weight_scale, bias, block_size, scale_fmt, config) -> float:
    import triton.testing

    fn = lambda: linear(x, weight_q, weight_scale, bias, block_size, scale_fmt, config=config)  # noqa: E731
    fn()
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")
