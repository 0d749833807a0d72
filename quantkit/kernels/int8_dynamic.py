"""int8 dynamic (W8A8) Triton kernels: per-token activation quantization and an int8 GEMM with the
scales, bias and output cast in its epilogue.

Numerics (those of :mod:`quantkit.reference.int8`, bit for bit on the GPU)::

    scale[r] = max(max_k |t[r, k]|, AMAX_EPS) / 127                       (float32, IEEE division)
    q[r, k]  = clamp(round_half_even(t[r, k] / scale[r]), -127, 127)       (int8, IEEE division)
    acc      = x_q @ w_q^T                                                 (exact, int32)
    y        = ((float32(acc) * x_scale[m]) * w_scale[n]) + float32(bias[n])   -> out dtype

``t`` is a [R, K] matrix: the activation ``x`` [M, K] (one scale per token) or the weight [N, K] (one
scale per output channel). The kernels are compiled without FMA contraction, so the epilogue rounds
like the reference's separate multiply and add.

The division ``t / scale`` is the per-element cost of every quantizer here, and the small-M kernels
repeat it in every program, so it is not done with ``div.rn`` (a reciprocal on the quarter-rate
special-function unit, a range check and a branch per element). Each row computes ``inv = RN(1 /
scale)`` once; per element ``q0 = t * inv`` and two exact-residual corrections ``q <- fma(fma(-scale,
q, t), inv, q)`` give ``RN(t / scale)`` exactly (Markstein's theorem: ``inv`` within half an ulp of
``1 / scale`` and a faithful ``q`` make the corrected quotient correctly rounded; the first correction
makes ``q`` faithful). The clamp is a no-op for finite inputs: ``|t| <= amax`` and ``scale >= amax /
127 * (1 - 2^-24)`` bound the quotient by 127.00001, whose rounding is 127. (The interpreter's
``tl.fma`` rounds twice, so there the FMA is evaluated in float64.)

Kernels
  * ``_quant_rows_kernel``: BLOCK_R rows per program. Rows up to 16384 wide are read once into
    registers (amax, then quantize); wider rows take two passes (the second read hits L2).
  * ``_gemv_kernel`` (M = 1, one launch): each program reduces the row's amax itself (the row is
    K * 2 bytes from L2, next to BLOCK_N * K weight bytes), then streams a [BLOCK_N, BLOCK_K] weight
    slab per step (``tl.range`` software pipelining), quantizes the matching x chunk and accumulates
    int32 products elementwise on CUDA cores; one row sum at the end.
  * ``_fused_dot_kernel`` (2 <= M <= 16, one launch): the same with BLOCK_M = 16 rows and an int8
    ``tl.dot`` (mma.sync); every program quantizes the 16 x rows it multiplies.
  * ``_fused_stream_kernel`` (2 <= M <= 16, one launch): the fused kernel with the weight as the left
    operand and each step's K range split over the warps (a 3-D int8 dot whose batch axis Triton lays
    over them), int32 slices summed once at the end: thin weight tiles, many programs, every warp its
    own load stream. BLOCK_M (8 or 16) x rows a program.
  * ``_gemm_kernel`` (M > 16, after ``_quant_rows_kernel``): int8 ``tl.dot`` (wgmma on sm_90 for
    BLOCK_M >= 64), int32 accumulator, grouped launch order, pipelined pointer loads; optionally
    split-K (int32 partials, summed with the epilogue by ``_splitk_reduce_kernel``) for the few-tile,
    long-K problems. ``_gemm_tma_kernel`` is the same with host TMA descriptors;
    ``_gemm_persistent_kernel`` loops a grid of one program per SM over the tiles in grouped order.
    With ``pdl`` the GEMM (and the reduction) use programmatic dependent launch: scheduled while
    the previous grid finishes, they wait for it in-kernel (``gdc_wait``) before their first load.
  * ``mode="gluon"`` (M > 16 on sm_90): the GEMM of :mod:`quantkit.kernels.i8_gemm_sm90`, which keeps
    one wgmma in flight across K steps (Triton 3.6 waits for each int8 wgmma to finish); the same
    epilogue, bit-identical outputs, 8-15 % faster at M >= 1024 on the H100. Where it cannot run the
    config runs the TMA kernel (and that one the pointer kernel). ``mode="gluon_ws"``: the same GEMM
    warp-specialized and persistent (a load warp, two consumer warpgroups), same fallbacks. ``gluon``
    takes SPLIT_K too (int32 partials for ``_splitk_reduce_kernel``, as the pointer kernel's; the
    pointer kernel where it cannot run).

  * ``decode`` configs (M <= 16, to 64 where a table picks it; sm_90): ``_quant_rows_kernel`` writes the codes and
    scales once, then the Gluon kernel of :mod:`quantkit.kernels.aq_decode_sm90` multiplies them with the weight
    (``mma.sync`` s8, the loaded bytes are the fragments), launched as a programmatic dependent of the
    quantization so that its first weight loads overlap it.

Intermediate buffers: the M > 16 path quantizes ``x`` once into a workspace, because the GEMM reads
every x row once per column block of the output: ``x_q`` [M, Kp] int8 (Kp = K rounded up to 16), the
float32 row scales and, with split-K, the int32 partials [SPLIT_K, M, N], all behind the output in the
output's allocation (:func:`quantkit.kernels.workspace.out_with_workspace`). So every path makes one
allocation a call: the fused kernels at M <= 16 make one launch; the decode path's codes and scales,
like the M > 16 path's, live behind the output.

Layouts: ``x`` [M, K] with unit stride along K (any row stride); ``weight_q`` int8 [N, K] contiguous
(nn.Linear's [out, in]); scales float32 [M] / [N]; ``bias`` [N] bf16/fp16/fp32; output [M, N]
contiguous in ``x.dtype`` (``gemm``: ``out_dtype``). Limits: K <= 133,144 (so that 127² · K fits in
int32); activations bf16, fp16 or fp32. TMA needs sm_90, 16-byte aligned buffers and K % 16 == 0 for
the weight; otherwise the pointer kernel runs.

``linear`` picks a config per problem (``quantkit.kernels.tuning``: tuned table, else
``default_config``); ``config["kernel"]`` is ``"gemv"``, ``"fused"``, ``"stream"``, ``"decode"`` or
``"two_pass"``. Every launch
goes through :func:`quantkit.kernels.launch.cached`. See notes/int8_dynamic.md for the reasoning.
"""
from __future__ import annotations

import functools
import os
import sys

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from quantkit.kernels.configs import check_keys, is_pow2, key_sets
from quantkit.kernels.launch import cached
from quantkit.kernels.workspace import out_with_workspace
from quantkit.kernels.tiling import grouped_pid
from quantkit.kernels.tuning import get_config
from quantkit.reference.common import AMAX_EPS, ceil_div

MIN_CAPABILITY = (8, 0)
FAMILY = "int8_dynamic"

# 127² · K must fit in an int32 accumulator.
MAX_K = (2**31 - 1) // (127 * 127)

# Compiled kernels use libdevice.rint and hardware FMA; the interpreter has no rint (floor-based
# rounding there, exact too) and its fma rounds twice. Read once, as Triton reads it when the
# kernels are decorated.
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
_COMPILED = not _INTERPRET

_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_SINGLE_PASS_MAX_K = 16384


def _loop_bound(k: int):
    """K as the kernels receive it. Under the interpreter (triton 3.6 with numpy >= 2.4) a runtime
    integer argument is a 1-element array that ``range()`` cannot take, so K goes in as a constexpr
    there; compiled kernels get a plain int."""
    return tl.constexpr(k) if _INTERPRET else k


# --------------------------------------------------------------------------- shared device code
@triton.jit
def _fma(a, b, c, COMPILED: tl.constexpr):
    if COMPILED:
        r = tl.fma(a, b, c)
    else:
        # the product of two float32 is exact in float64; one more rounding to float32
        r = (a.to(tl.float64) * b.to(tl.float64) + c.to(tl.float64)).to(tl.float32)
    return r


@triton.jit
def _round_half_even(v, COMPILED: tl.constexpr):
    if COMPILED:
        r = libdevice.rint(v)
    else:
        f = tl.floor(v)
        d = v - f  # exact for float32
        r = tl.where(d > 0.5, f + 1.0, tl.where(d < 0.5, f, f + (f - 2.0 * tl.floor(f * 0.5))))
    return r


@triton.jit
def _abs_bits(x_ptr):
    """(x's bits as integers, mask clearing the sign bit of those integers widened to int32). For
    IEEE floats |a| < |b| exactly when (bits(a) & mask) < (bits(b) & mask), so an amax pass can
    compare integers (no float conversion per element) and turn the winner back into a float once;
    NaN wins, as in torch."""
    if x_ptr.dtype.element_ty == tl.float32:
        return x_ptr.to(tl.pointer_type(tl.int32)), 0x7FFFFFFF
    else:
        return x_ptr.to(tl.pointer_type(tl.int16)), 0x7FFF


@triton.jit
def _row_scale(amax, EPS: tl.constexpr):
    """(scale, RN(1 / scale)) of rows with absolute maxima ``amax``."""
    scale = tl.math.div_rn(tl.maximum(amax, EPS), 127.0)
    return scale, tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)


@triton.jit
def _codes(v, scale, inv, COMPILED: tl.constexpr):
    """round_half_even(RN(v / scale)) as float32, ``scale``/``inv`` broadcast to v's shape (module
    docstring: why two corrections and no clamp)."""
    q = v * inv
    q = _fma(_fma(-scale, q, v, COMPILED), inv, q, COMPILED)
    q = _fma(_fma(-scale, q, v, COMPILED), inv, q, COMPILED)
    return _round_half_even(q, COMPILED)


@triton.jit
def _rows_scale(x_ptr, offs_m, m_mask, K, stride_xm, EPS: tl.constexpr, BLOCK_M: tl.constexpr,
                AMAX_BLOCK: tl.constexpr, AMAX_STAGES: tl.constexpr):
    """(scale, RN(1 / scale)) of x rows ``offs_m`` (masked rows read as 0). The amax loop is pipelined:
    a row is K / AMAX_BLOCK dependent L2 round trips otherwise."""
    bits_ptr, sign_mask = _abs_bits(x_ptr)
    bits_rows = bits_ptr + offs_m.to(tl.int64)[:, None] * stride_xm
    offs_a = tl.arange(0, AMAX_BLOCK)
    amax = tl.zeros([BLOCK_M, AMAX_BLOCK], dtype=tl.int32)
    for k0 in tl.range(0, K, AMAX_BLOCK, num_stages=AMAX_STAGES):
        xa = tl.load(bits_rows + k0 + offs_a[None, :], mask=m_mask[:, None] & (k0 + offs_a[None, :] < K), other=0)
        amax = tl.maximum(amax, xa.to(tl.int32) & sign_mask)
    amax_f = tl.max(amax, axis=1).to(bits_ptr.dtype.element_ty).to(x_ptr.dtype.element_ty, bitcast=True)
    return _row_scale(amax_f.to(tl.float32), EPS)


@triton.jit
def _store_scaled(acc, a_s, offs_m, offs_n, M, N, b_scale_ptr, bias_ptr, c_ptr, stride_cm,
                  HAS_BIAS: tl.constexpr):
    """y = (f32(acc) * a_s[m]) * b_s[n] (+ bias[n]) -> c's dtype, masked to [M, N]."""
    m_mask = offs_m < M
    n_mask = offs_n < N
    b_s = tl.load(b_scale_ptr + offs_n, mask=n_mask, other=0.0)
    y = acc.to(tl.float32) * a_s[:, None] * b_s[None, :]
    if HAS_BIAS:
        y = y + tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, y.to(c_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


@triton.jit
def _f32_ptr(base, offset):
    """A float32 pointer ``offset`` elements of ``base``'s type past ``base`` (row scales can live in
    an int8 workspace behind the codes)."""
    return (base + offset).to(tl.pointer_type(tl.float32))


# --------------------------------------------------------------------------- row quantization
@triton.jit
def _quant_rows_kernel(t_ptr, q_ptr, s_base, s_off, R, K, stride_tr, stride_qr,
                       EPS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
                       SINGLE_PASS: tl.constexpr, LAUNCH_DEPENDENTS: tl.constexpr, COMPILED: tl.constexpr):
    if LAUNCH_DEPENDENTS:
        # Programmatic dependent launch: the GEMM that reads these codes may be scheduled now; it
        # waits (gdc_wait) for this grid's completion before its first load.
        gdc_launch_dependents()
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    r_mask = rows < R
    cols = tl.arange(0, BLOCK_K)
    t_rows = t_ptr + rows.to(tl.int64)[:, None] * stride_tr
    q_rows = q_ptr + rows.to(tl.int64)[:, None] * stride_qr
    if SINGLE_PASS:
        mask = r_mask[:, None] & (cols[None, :] < K)
        t = tl.load(t_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        scale, inv = _row_scale(tl.max(tl.abs(t), axis=1), EPS)
        codes = _codes(t, tl.broadcast_to(scale[:, None], t.shape), tl.broadcast_to(inv[:, None], t.shape),
                       COMPILED)
        tl.store(q_rows + cols[None, :], codes.to(tl.int8), mask=mask)
    else:
        amax = tl.zeros([BLOCK_R, BLOCK_K], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            mask = r_mask[:, None] & (k0 + cols[None, :] < K)
            t = tl.load(t_rows + k0 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.abs(t))
        scale, inv = _row_scale(tl.max(amax, axis=1), EPS)
        scale_b = tl.broadcast_to(scale[:, None], [BLOCK_R, BLOCK_K])
        inv_b = tl.broadcast_to(inv[:, None], [BLOCK_R, BLOCK_K])
        for k0 in range(0, K, BLOCK_K):
            mask = r_mask[:, None] & (k0 + cols[None, :] < K)
            t = tl.load(t_rows + k0 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            tl.store(q_rows + k0 + cols[None, :], _codes(t, scale_b, inv_b, COMPILED).to(tl.int8), mask=mask)
    tl.store(_f32_ptr(s_base, s_off) + rows, scale, mask=r_mask)


# --------------------------------------------------------------------------- M = 1: fused GEMV
@triton.jit
def _gemv_kernel(x_ptr, w_ptr, w_scale_ptr, bias_ptr, c_ptr, N, K, stride_xm, stride_cm,
                 EPS: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 AMAX_BLOCK: tl.constexpr, STAGES: tl.constexpr, EVEN_K: tl.constexpr, COMPILED: tl.constexpr):
    pid_n = tl.program_id(0)
    row = tl.program_id(1)
    x_row = x_ptr + row.to(tl.int64) * stride_xm

    # The token's scale needs its whole row before any element is quantized. The row is short next
    # to the BLOCK_N * K weight bytes this program streams, so each program reduces it (from L2)
    # rather than paying a second launch. Elementwise maxima; one reduction at the end.
    bits_ptr, sign_mask = _abs_bits(x_ptr)
    bits_row = bits_ptr + row.to(tl.int64) * stride_xm
    offs_a = tl.arange(0, AMAX_BLOCK)
    amax = tl.zeros([AMAX_BLOCK], dtype=tl.int32)
    for k0 in range(0, K, AMAX_BLOCK):
        xa = tl.load(bits_row + k0 + offs_a, mask=k0 + offs_a < K, other=0)
        amax = tl.maximum(amax, xa.to(tl.int32) & sign_mask)
    amax_f = tl.max(amax, axis=0).to(bits_ptr.dtype.element_ty).to(x_ptr.dtype.element_ty, bitcast=True)
    scale, inv = _row_scale(amax_f.to(tl.float32), EPS)
    scale_k = tl.broadcast_to(scale, [BLOCK_K])
    inv_k = tl.broadcast_to(inv, [BLOCK_K])

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Rows past N are wrapped onto valid ones (computed, never stored): no N mask in the loop.
    w_ptrs = w_ptr + (offs_n % N).to(tl.int64)[:, None] * K + offs_k[None, :]
    # int32 products accumulate elementwise; the row sums (shuffles) happen once, after the loop.
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.int32)
    for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):
        if EVEN_K:
            xk = tl.load(x_row + k0 + offs_k)
            w = tl.load(w_ptrs + k0, eviction_policy="evict_first")
        else:
            k_mask = k0 + offs_k < K
            xk = tl.load(x_row + k0 + offs_k, mask=k_mask, other=0.0)
            w = tl.load(w_ptrs + k0, mask=k_mask[None, :], other=0, eviction_policy="evict_first")
        xq = _codes(xk.to(tl.float32), scale_k, inv_k, COMPILED).to(tl.int32)
        acc += w.to(tl.int32) * xq[None, :]
    dot = tl.sum(acc, axis=1)

    n_mask = offs_n < N
    y = dot.to(tl.float32) * scale * tl.load(w_scale_ptr + offs_n, mask=n_mask, other=0.0)
    if HAS_BIAS:
        y = y + tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
    tl.store(c_ptr + row.to(tl.int64) * stride_cm + offs_n, y.to(c_ptr.dtype.element_ty), mask=n_mask)


# --------------------------------------------------------------------------- 2 <= M <= 16: fused tl.dot
@triton.jit
def _fused_dot_kernel(x_ptr, w_ptr, w_scale_ptr, bias_ptr, c_ptr, M, N, K, stride_xm, stride_cm,
                      EPS: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, AMAX_BLOCK: tl.constexpr, AMAX_STAGES: tl.constexpr,
                      EVEN_K: tl.constexpr, COMPILED: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask = offs_m < M
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm

    # Per-token scales of the BLOCK_M rows (rows past M read as 0: codes 0, never stored).
    scale, inv = _rows_scale(x_ptr, offs_m, m_mask, K, stride_xm, EPS, BLOCK_M, AMAX_BLOCK, AMAX_STAGES)
    scale_b = tl.broadcast_to(scale[:, None], [BLOCK_M, BLOCK_K])
    inv_b = tl.broadcast_to(inv[:, None], [BLOCK_M, BLOCK_K])

    w_ptrs = w_ptr + (offs_n % N).to(tl.int64)[:, None] * K + offs_k[None, :]  # [BLOCK_N, BLOCK_K]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            xt = tl.load(x_rows + k0 + offs_k[None, :], mask=m_mask[:, None], other=0.0)
            w = tl.load(w_ptrs + k0, eviction_policy="evict_first")
        else:
            k_mask = k0 + offs_k < K
            xt = tl.load(x_rows + k0 + offs_k[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0)
            w = tl.load(w_ptrs + k0, mask=k_mask[None, :], other=0, eviction_policy="evict_first")
        xq = _codes(xt.to(tl.float32), scale_b, inv_b, COMPILED).to(tl.int8)
        acc = tl.dot(xq, tl.trans(w), acc, out_dtype=tl.int32)
    _store_scaled(acc, scale, offs_m, offs_n, M, N, w_scale_ptr, bias_ptr, c_ptr, stride_cm, HAS_BIAS)


# --------------------------------------------------------------------------- M <= 16: K split over the warps
@triton.jit
def _fused_stream_kernel(x_ptr, w_ptr, w_scale_ptr, bias_ptr, c_ptr, M, N, K, stride_xm, stride_cm,
                         EPS: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, SLICES: tl.constexpr, AMAX_BLOCK: tl.constexpr,
                         AMAX_STAGES: tl.constexpr, EVEN_K: tl.constexpr, COMPILED: tl.constexpr):
    """The fused kernel's work with the weight as the left operand and each step's K range split
    among the warps: a step covers SLICES slices of BLOCK_K columns, the batch axis of a 3-D int8 dot
    that Triton lays over the warps (SLICES == num_warps), acc[s, n, m] += W[n, slice s] · xq[m, slice s],
    and the int32 slices are summed once after the loop (exact: the result is the fused kernel's).
    A 16-row weight tile thus still gives every warp its own stream of K, so N = 4096 makes 256
    programs of several independent load chains each instead of 128 programs whose warps share one."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = offs_m < M

    # Per-token scales of the BLOCK_M rows, as in _fused_dot_kernel (rows past M read as 0).
    scale, inv = _rows_scale(x_ptr, offs_m, m_mask, K, stride_xm, EPS, BLOCK_M, AMAX_BLOCK, AMAX_STAGES)
    scale_b = tl.broadcast_to(scale[None, None, :], [SLICES, BLOCK_K, BLOCK_M])
    inv_b = tl.broadcast_to(inv[None, None, :], [SLICES, BLOCK_K, BLOCK_M])

    k_base = tl.arange(0, SLICES)[:, None, None] * BLOCK_K
    k_w = k_base + tl.arange(0, BLOCK_K)[None, None, :]  # [SLICES, 1, BLOCK_K]
    k_x = k_base + tl.arange(0, BLOCK_K)[None, :, None]  # [SLICES, BLOCK_K, 1]
    w_ptrs = w_ptr + (offs_n % N).to(tl.int64)[None, :, None] * K + k_w  # [SLICES, BLOCK_N, BLOCK_K]
    x_ptrs = x_ptr + offs_m.to(tl.int64)[None, None, :] * stride_xm + k_x  # [SLICES, BLOCK_K, BLOCK_M]
    STEP: tl.constexpr = SLICES * BLOCK_K
    acc = tl.zeros([SLICES, BLOCK_N, BLOCK_M], dtype=tl.int32)
    for k0 in range(0, K, STEP):
        if EVEN_K:
            w = tl.load(w_ptrs + k0, eviction_policy="evict_first")
            xt = tl.load(x_ptrs + k0, mask=m_mask[None, None, :], other=0.0)
        else:
            w = tl.load(w_ptrs + k0, mask=k_w < K - k0, other=0, eviction_policy="evict_first")
            xt = tl.load(x_ptrs + k0, mask=m_mask[None, None, :] & (k_x < K - k0), other=0.0)
        xq = _codes(xt.to(tl.float32), scale_b, inv_b, COMPILED).to(tl.int8)
        acc = tl.dot(w, xq, acc, out_dtype=tl.int32)
    _store_scaled(tl.trans(tl.sum(acc, axis=0)), scale, offs_m, offs_n, M, N, w_scale_ptr, bias_ptr, c_ptr,
                  stride_cm, HAS_BIAS)


# --------------------------------------------------------------------------- M > 16: GEMM on quantized x
@triton.jit
def _gemm_kernel(a_ptr, a_scale_ptr, a_scale_off, b_ptr, b_scale_ptr, bias_ptr, c_ptr, part_off, M, N, K,
                 stride_am, stride_cm, k_iters,
                 HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr, WAIT_PRIOR: tl.constexpr):
    """Grid (tiles, SPLIT_K); split s multiplies K blocks [s * k_iters, (s + 1) * k_iters). With
    SPLIT_K > 1 the raw int32 sums go to the partials at element ``part_off`` of ``c_ptr`` (the int8
    workspace), [SPLIT_K, M, N], for ``_splitk_reduce_kernel``."""
    if WAIT_PRIOR:
        gdc_wait()  # launched early (PDL): the quantization grid must be complete and visible
    pid_m, pid_n = grouped_pid(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    split = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    k_first = split * k_iters * BLOCK_K
    # Wrapping the edge rows/columns onto valid ones keeps M and N masks out of the K loop; the
    # duplicates are computed and then not stored.
    a_ptrs = a_ptr + (offs_m % M).to(tl.int64)[:, None] * stride_am + (k_first + offs_k)[None, :]
    b_ptrs = b_ptr + (offs_n % N).to(tl.int64)[None, :] * K + (k_first + offs_k)[:, None]  # [BLOCK_K, BLOCK_N]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
    for k in range(0, k_iters):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k_first - k * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    if SPLIT_K == 1:
        a_s = tl.load(_f32_ptr(a_scale_ptr, a_scale_off) + offs_m, mask=offs_m < M, other=0.0)
        _store_scaled(acc, a_s, offs_m, offs_n, M, N, b_scale_ptr, bias_ptr, c_ptr, stride_cm, HAS_BIAS)
    else:
        parts = (c_ptr + part_off).to(tl.pointer_type(tl.int32)) + split.to(tl.int64) * M * N
        p_ptrs = parts + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.store(p_ptrs, acc, mask=(offs_m < M)[:, None] & (offs_n < N)[None, :])


@triton.jit
def _splitk_reduce_kernel(part_ptr, part_off, a_scale_ptr, a_scale_off, b_scale_ptr, bias_ptr, c_ptr, M, N, stride_cm,
                          SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, WAIT_PRIOR: tl.constexpr):
    """Sum the split-K int32 partials (exact, in any order) and apply the epilogue."""
    if WAIT_PRIOR:
        gdc_wait()
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    p_ptrs = (part_ptr + part_off).to(tl.pointer_type(tl.int32)) + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(p_ptrs + s * M * N, mask=mask, other=0)
    a_s = tl.load(_f32_ptr(a_scale_ptr, a_scale_off) + offs_m, mask=offs_m < M, other=0.0)
    _store_scaled(acc, a_s, offs_m, offs_n, M, N, b_scale_ptr, bias_ptr, c_ptr, stride_cm, HAS_BIAS)


@triton.jit
def _gemm_tma_kernel(a_desc, a_scale_ptr, a_scale_off, b_desc, b_scale_ptr, bias_ptr, c_ptr, M, N, K, stride_cm,
                     HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, WAIT_PRIOR: tl.constexpr):
    if WAIT_PRIOR:
        gdc_wait()
    pid_m, pid_n = grouped_pid(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
    # TMA fills out-of-bounds rows and columns with zeros: no masks anywhere in the loop.
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([off_m, k * BLOCK_K])
        b = b_desc.load([off_n, k * BLOCK_K])
        acc = tl.dot(a, b.T, acc, out_dtype=tl.int32)
    _tma_epilogue(acc, off_m, off_n, _f32_ptr(a_scale_ptr, a_scale_off), b_scale_ptr, bias_ptr, c_ptr, M, N,
                  stride_cm, HAS_BIAS, BLOCK_M, BLOCK_N)


@triton.jit
def _tma_epilogue(acc, off_m, off_n, a_scales, b_scale_ptr, bias_ptr, c_ptr, M, N, stride_cm,
                  HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    a_s = tl.load(a_scales + offs_m, mask=offs_m < M, other=0.0)
    _store_scaled(acc, a_s, offs_m, offs_n, M, N, b_scale_ptr, bias_ptr, c_ptr, stride_cm, HAS_BIAS)


@triton.jit
def _persistent_tile(tile, a_desc, b_desc, a_scales, b_scale_ptr, bias_ptr, c_ptr, M, N, K, stride_cm,
                     HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr):
    """One output tile of the persistent kernel (tile number ``tile`` in grouped order)."""
    pid_m, pid_n = grouped_pid(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
        acc = tl.dot(a, b.T, acc, out_dtype=tl.int32)
    _tma_epilogue(acc, pid_m * BLOCK_M, pid_n * BLOCK_N, a_scales, b_scale_ptr, bias_ptr, c_ptr, M, N,
                  stride_cm, HAS_BIAS, BLOCK_M, BLOCK_N)


@triton.jit
def _gemm_persistent_kernel(a_desc, a_scale_ptr, a_scale_off, b_desc, b_scale_ptr, bias_ptr, c_ptr, M, N, K,
                            stride_cm, num_tiles, num_progs,
                            HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, WAIT_PRIOR: tl.constexpr,
                            COMPILED: tl.constexpr):
    # One program per SM walks the tiles in grouped order: no tail of short-lived CTAs, and the
    # flattened loop lets the next tile's first loads start under this tile's epilogue.
    if WAIT_PRIOR:
        gdc_wait()
    a_scales = _f32_ptr(a_scale_ptr, a_scale_off)
    pid = tl.program_id(0)
    if COMPILED:
        for tile in tl.range(pid, num_tiles, num_progs, flatten=True):
            _persistent_tile(tile, a_desc, b_desc, a_scales, b_scale_ptr, bias_ptr, c_ptr, M, N, K, stride_cm,
                             HAS_BIAS, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
    else:
        # The interpreter's program id cannot bound a range(): a fixed trip count, the last tile
        # repeated (the same values stored twice) where a program has fewer tiles.
        for i in range(0, tl.cdiv(num_tiles, num_progs)):
            tile = tl.minimum(pid + i * num_progs, num_tiles - 1)
            _persistent_tile(tile, a_desc, b_desc, a_scales, b_scale_ptr, bias_ptr, c_ptr, M, N, K, stride_cm,
                             HAS_BIAS, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)


_quant_rows_fast = cached(_quant_rows_kernel)
_gemv_fast = cached(_gemv_kernel)
_fused_dot_fast = cached(_fused_dot_kernel)
_fused_stream_fast = cached(_fused_stream_kernel)
_gemm_fast = cached(_gemm_kernel)
_splitk_reduce_fast = cached(_splitk_reduce_kernel)
_gemm_tma_fast = cached(_gemm_tma_kernel)
_gemm_persistent_fast = cached(_gemm_persistent_kernel)


# --------------------------------------------------------------------------- host side: checks
def _check_device(t: torch.Tensor, name: str) -> None:
    if t.device.type != "cuda" and not _INTERPRET:
        raise ValueError(f"int8_dynamic kernels need CUDA tensors (or TRITON_INTERPRET=1); {name} is on {t.device}")


def _check_rows(t: torch.Tensor, name: str, dtypes) -> None:
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype in {[str(d) for d in dtypes]}, got {t.dtype}")
    if t.shape[1] > 1 and t.stride(1) != 1:
        raise ValueError(f"{name} must be contiguous along its last dimension, got strides {t.stride()}")
    _check_device(t, name)


def _check_k(K: int) -> None:
    if K > MAX_K:
        raise ValueError(f"K={K} is too large: 127² · K overflows the int32 accumulator (K <= {MAX_K})")


def _check_weight(weight_q: torch.Tensor, weight_scale: torch.Tensor, K: int, device) -> int:
    if weight_q.dim() != 2 or weight_q.dtype != torch.int8:
        raise TypeError(f"weight_q must be a 2-D int8 tensor [N, K], got {weight_q.dtype} {tuple(weight_q.shape)}")
    N, wk = weight_q.shape
    if wk != K:
        raise ValueError(f"weight_q has K={wk} but the activation has K={K}")
    if not weight_q.is_contiguous():
        raise ValueError(f"weight_q must be contiguous [N, K], got strides {weight_q.stride()}")
    if weight_scale.shape != (N,) or weight_scale.dtype != torch.float32 or not weight_scale.is_contiguous():
        raise ValueError(f"weight_scale must be a contiguous float32 [N={N}] tensor, got "
                         f"{weight_scale.dtype} {tuple(weight_scale.shape)}")
    if weight_q.device != device or weight_scale.device != device:
        raise ValueError(f"weight_q ({weight_q.device}) and weight_scale ({weight_scale.device}) must be on the "
                         f"activation's device {device}")
    return N


def _check_bias(bias: torch.Tensor | None, N: int, device) -> None:
    if bias is None:
        return
    if bias.shape != (N,) or bias.dtype not in _FLOAT_DTYPES or not bias.is_contiguous():
        raise ValueError(f"bias must be a contiguous [N={N}] bf16/fp16/fp32 tensor, got {bias.dtype} "
                         f"{tuple(bias.shape)}")
    if bias.device != device:
        raise ValueError(f"bias is on {bias.device} but the activation is on {device}")


@functools.lru_cache(maxsize=None)
def _device_facts(index: int | None) -> tuple[bool, int]:
    """(TMA available, SM count) of a CUDA device; (True, 4) under the interpreter."""
    if index is None:  # CPU tensors: the interpreter
        return True, 4
    props = torch.cuda.get_device_properties(index)
    return (props.major, props.minor) >= (9, 0), props.multi_processor_count


def _facts(t: torch.Tensor) -> tuple[bool, int]:
    if t.device.type != "cuda":
        return _device_facts(None)
    return _device_facts(t.device.index if t.device.index is not None else torch.cuda.current_device())


# --------------------------------------------------------------------------- configs
_KEYS = {
    "gemv": ("BLOCK_N", "BLOCK_K", "num_warps", "num_stages"),
    "fused": ("BLOCK_N", "BLOCK_K", "num_warps", "num_stages"),
    "stream": ("BLOCK_N", "BLOCK_M", "BLOCK_K", "num_warps", "num_stages"),
    "two_pass": ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K", "num_warps", "num_stages", "mode", "pdl"),
    "decode": ("MT", "WK", "WM", "DK", "SUB", "BM", "PDL"),
}
_OPTIONAL_KEYS = {"gemv": (), "fused": (), "stream": (), "two_pass": ("EPI",), "decode": ("DIAG", "DG", "TILED", "XPF")}
_KINDS = key_sets(_KEYS, _OPTIONAL_KEYS)
_MODES = ("pointer", "tma", "persistent", "gluon", "gluon_ws")


def _gemv(bn, bk, warps, stages) -> dict:
    return {"kernel": "gemv", "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages}


def _fused(bn, bk, warps, stages) -> dict:
    return {"kernel": "fused", "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages}


def _stream(bn, bk, warps, stages, bm=16) -> dict:
    """M <= 16, one launch: ``BLOCK_K`` is one warp's slice of a step (``num_warps`` slices a step);
    ``BLOCK_M`` the most x rows a program takes (fewer rows: more programs, each weight tile read by
    several from L2)."""
    return {"kernel": "stream", "BLOCK_N": bn, "BLOCK_M": bm, "BLOCK_K": bk, "num_warps": warps,
            "num_stages": stages}


def _two_pass(bm, bn, bk, warps, stages, mode="pointer", pdl=False, split_k=1, group_m=8, epi="rows") -> dict:
    """``pdl``: launch the GEMM (and the split-K reduction) with programmatic dependent launch
    (sm_90+): its CTAs are scheduled while the previous grid finishes and wait for it in-kernel.
    ``split_k``: K split over that many programs per output tile (pointer mode), int32 partials in
    the workspace, summed by a second kernel. ``epi="tma"`` (mode ``gluon_ws``): the output tiles
    leave by TMA stores that overlap the next tile's K loop (:func:`i8_gemm_sm90.launch_ws`)."""
    cfg = {"kernel": "two_pass", "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m,
           "SPLIT_K": split_k, "num_warps": warps, "num_stages": stages, "mode": mode, "pdl": pdl}
    if epi != "rows":
        cfg["EPI"] = epi
    return cfg


def _decode(mt, wk, wm=1, dk=64, sub=1, pdl=True, bm=16, diag=False, xpf=True) -> dict:
    """M <= 64 (ceil(M / BM) programs a weight tile), sm_90: the row quantization kernel writes the codes once,
    then the Gluon decode kernel of :mod:`quantkit.kernels.aq_decode_sm90` (16·MT·WM weight rows a program, WK·WM
    warps, DK-deep K chunks, SUB per warp and trip, at most BM x rows a program; ``pdl``: launched as a
    programmatic dependent of the quantization). Both in one allocation with the output. Where it cannot run,
    ``_gemm_default`` runs. ``diag`` (M <= 4): the x tile's idle columns take 8 / M chunks of a row
    (:mod:`quantkit.kernels.aq_decode_sm90`); ``xpf``: the x codes loaded a trip ahead (else at use)."""
    cfg = {"kernel": "decode", "MT": mt, "WK": wk, "WM": wm, "DK": dk, "SUB": sub, "BM": bm, "PDL": pdl}
    if diag:
        cfg["DIAG"] = True
    if not xpf:
        cfg["XPF"] = False
    return cfg


def check_config_entry(config: dict) -> None:
    """A ValueError for a config this family cannot run (what ``tuning`` checks a user-cache entry with)."""
    _check_config(config)


def _check_config(config: dict) -> None:
    kind = check_keys("int8_dynamic", config, _KINDS)
    if kind == "decode":
        from quantkit.kernels.aq_decode_sm90 import check_config

        check_config(config)
        return
    if kind == "stream":
        # int8 mma.sync takes 16 weight rows and 32-deep K steps per warp slice; x rows up to 16.
        if not (is_pow2(config["BLOCK_N"]) and config["BLOCK_N"] >= 16 and is_pow2(config["BLOCK_K"])
                and config["BLOCK_K"] >= 32 and is_pow2(config["BLOCK_M"]) and config["BLOCK_M"] <= 16
                and is_pow2(config["num_warps"])):
            raise ValueError(f"int8_dynamic stream config: BLOCK_N a power of two >= 16, BLOCK_K a power of two "
                             f">= 32, BLOCK_M a power of two <= 16 and num_warps a power of two, got {config!r}")
    if kind == "two_pass":
        if config["BLOCK_M"] < 16:
            raise ValueError(f"int8_dynamic two_pass config: BLOCK_M must be >= 16 (tl.dot), got {config!r}")
        if config["mode"] not in _MODES:
            raise ValueError(f"int8_dynamic two_pass config: mode must be one of {_MODES}, got {config!r}")
        if config["mode"] == "gluon_ws" and not (config["BLOCK_M"] in (128, 256) and config["num_warps"] == 8):
            raise ValueError(f"int8_dynamic gluon_ws config: BLOCK_M 128 or 256 and num_warps 8 (two consumer "
                             f"warpgroups of BLOCK_M / 2 rows), got {config!r}")
        if config.get("EPI", "rows") not in ("rows", "tma") or (config.get("EPI") == "tma"
                                                               and config["mode"] != "gluon_ws"):
            raise ValueError(f"int8_dynamic two_pass config: EPI is 'rows' or 'tma', and 'tma' only in mode "
                             f"'gluon_ws', got {config!r}")
        if config["SPLIT_K"] < 1 or (config["SPLIT_K"] > 1 and config["mode"] not in ("pointer", "gluon")):
            raise ValueError(f"int8_dynamic two_pass config: SPLIT_K must be >= 1, and 1 unless mode is "
                             f"'pointer' or 'gluon', got {config!r}")


def default_config(M: int, N: int, K: int) -> dict:
    """A heuristic config valid for every problem (the fallback when no tuned entry exists)."""
    if 2 <= M <= 16:
        # The Gluon decode kernel where it can run (sm_90; it falls back to the fused default
        # elsewhere): x quantized once instead of in every program (H100 sweep, notes/int8_dynamic.md).
        if K % 128 == 0 and M > 8 and N <= 2048:
            # Narrow layers: two chunks a warp and trip, x at use, 8-row x tiles (two programs a weight tile):
            # 2048 x 2048 and 2048 x 8192 at M = 16 took 10.6 and 16.4 µs against 10.9 and 19.1 (H100 sweep,
            # notes/int8_dynamic.md, round 33; wider layers kept one chunk, as the tuned 4096-wide entries do)
            return _decode(1, 4, dk=128, sub=2, bm=8, xpf=False)
        return _decode(1, 4, dk=128) if K % 128 == 0 else _decode(1, 4) if K % 64 == 0 else _fused_default(N)
    if 16 < M <= 64 and K % 128 == 0 and (N <= 1024 or (N <= 2048 and M <= 32)):
        # Narrow layers (k / v projections): the decode kernel with 2-4 x tiles a weight tile, N / 16 weight
        # tiles: 0.91-1.27x of bf16 where the two-pass GEMM ran 0.64-0.84x at N = 512-2048, M = 17-64 on an
        # H100 (notes/int8_dynamic.md, round 32). At N = 2048 past M = 32 the Gluon GEMM split in two along K
        # leads (2048², M = 64: 13.7 against 14.7 µs; round 33).
        return _decode(1, 4, dk=128, sub=2, xpf=False)
    return _gemm_default(M, N, K)


def _gemm_default(M: int, N: int, K: int) -> dict:
    """:func:`default_config` without the decode kernel (what a ``decode`` config runs where that kernel
    cannot, and what :func:`gemm` runs): the fused kernel at 2 <= M <= 16, the two-pass GEMMs above."""
    if M == 1:
        return _gemv(16, 512, 4, 3)
    if M <= 16:
        return _fused_default(N)
    tiles = ceil_div(M, 128) * ceil_div(N, 128)
    if M <= 64:
        # The H100 sweep on shapes of other models at M = 64 (notes/int8_dynamic.md, round 33) and the H100
        # table's Llama entries: 128 x 128 tiles whole where they are many (14336 x 4096), cut in four along a
        # long K (4096 x 14336, 3584 x 18944); 64 x 64 tiles where 80 or more of them cover N at K <= 8192
        # (eagerly 1.08-1.27x of bf16 at 5120², 8192 x 2048 and 8192², against 1.02-1.18x for the next rule);
        # else the Gluon GEMM's 64-wide tiles cut in two (2048 x 8192, 3584², 5120 x 13824: 22.4 / 18.1 / 55.9
        # µs against 26.3 / 19.4 / 58.4 for the round-32 defaults).
        if tiles >= 96:
            return _two_pass(128, 128, 128, 8, 4, mode="gluon", pdl=True)
        if K >= 3 * N and N > 2048:
            return _two_pass(128, 128, 128, 8, 4, pdl=True, split_k=4)
        if ceil_div(N, 64) >= 80 and K <= 8192:
            return _two_pass(64, 64, 128, 4, 4)
        return _two_pass(128, 64, 128, 8, 6, mode="gluon", pdl=True, split_k=2)
    if M <= 256:
        # >= ~100 programs, so that enough SMs pull the weight: 128 x 128 tiles where there are that
        # many (each x row and weight column is re-read from L2 N / 128 and M / 128 times), 64 x 64
        # tiles for short K, split-K for long K where the tiles are few (notes: L2 traffic per cell).
        # Round 33: the long-K split only up to 64 tiles (5120 x 13824, M = 256: 80 tiles, 64.4 µs on
        # 64 x 64 tiles against 87.1 split), on the Gluon GEMM's 64-wide tiles (2048 x 8192: 26.3 against
        # 28.5 µs for 128 x 128 tiles cut in four).
        if tiles >= 96:
            return _two_pass(128, 128, 128, 8, 4)
        if K >= 8192 and tiles <= 64:
            return _two_pass(128, 64, 128, 8, 6, mode="gluon", pdl=True, split_k=2)
        return _two_pass(64, 64, 128, 4, 4)
    # Four stages, not three: 5-10 % faster at M = 1024-4096 on every benchmark shape (H100 probe,
    # notes/int8_dynamic.md, round 10); 4 x 48 KB of operand tiles fit (the epilogue reuses them). The
    # Gluon GEMM on sm_90 (11-15 % faster than the Triton one, round 11); elsewhere "gluon" runs as "tma".
    return _two_pass(128, 256, 128, 8, 4, mode="gluon")


def _fused_default(N: int) -> dict:
    """M <= 16 in one launch. Every program quantizes the x rows it multiplies. At N = 4096, 32-row
    weight tiles with the K of a step split over the warps and 8 x rows a program (256 programs, each
    weight tile read twice from L2) beat the 16-row-block fused kernel; wide layers have programs
    enough for the fused kernel's 64-row tiles, which quantize x half as often per weight byte (H100
    sweep)."""
    return _stream(32, 128, 4, 3, bm=8) if N <= 8192 else _fused(64, 256, 8, 3)


# The search space: one list per M range, <= 8 configs each, 24 distinct over the benchmark cells.
# (32-row programs of two warps, MT 2 / WK 2, took the place of WK 8, which no sweep picked: 6 % faster at
# 14336 x 4096, M = 16 in a wider probe, notes/int8_dynamic.md, round 13)
# The last: two chunks a warp and trip, 8 x rows a program, x at use (fp8-block's k / v program): 4.8 % faster than
# one chunk a trip at 1024 x 4096, M = 16 on an H100, 0.7 % of the b16 decode step (notes/int8_dynamic.md, round 27).
# It took the place of the eight-warp 64-deep program `_decode(1, 2, wm=4)`, which no sweep had put in a table.
_DECODE_CANDIDATES = [_decode(1, 4), _decode(2, 2, dk=128), _decode(1, 4, dk=128), _decode(1, 4, dk=128, bm=8),
                      _decode(1, 4, wm=2, dk=128), _decode(1, 4, dk=128, sub=2, bm=8, xpf=False)]
# M = 1 stays with the GEMVs: the decode kernel measured up to 5 µs faster per layer with L2 flushed (14336-wide
# shapes) but not inside a CUDA-graph decode step, where x is hot in L2 and its quantization kernel is one
# more grid to wait for (notes/int8_dynamic.md, round 7).
# (The unpipelined 1024-deep GEMV took the place of 32 x 256, which no sweep picked: 16 % faster than the
# 2-stage one at 4096 x 14336 in a wider probe. The sweep also picks it at 4096², 14336 x 4096 and
# 1024 x 4096 by 2-5 %, but there it made the CUDA-graph decode step 2 % slower, so the shipped table
# has it at 4096 x 14336 only: notes/int8_dynamic.md, round 13.)
_GEMV_CANDIDATES = [_gemv(16, 512, 4, 3), _gemv(8, 1024, 4, 2), _gemv(8, 1024, 4, 1)]
_FUSED_CANDIDATES = [_fused(64, 256, 8, 3), _stream(32, 128, 4, 3, bm=8)] + _DECODE_CANDIDATES
# M = 2-4: the decode kernel's DIAG programs (4 or 2 chunks of a row a slot in the x tile's idle columns)
_DECODE_4_CANDIDATES = [_fused(64, 256, 8, 3), _decode(1, 4, dk=128), _decode(2, 2, dk=128),
                        _decode(1, 4, dk=128, diag=True), _decode(2, 2, dk=128, diag=True),
                        _decode(1, 2, dk=128, diag=True), _decode(1, 4, diag=True), _decode(2, 4, dk=128, diag=True)]
# (The Gluon GEMM with split-K, 128 x 64 tiles in two K halves, took the place of the Triton pointer GEMM at
# 64 x 128, which no sweep shipped: 1-5 % ahead of the shipped configs at M = 128 in the H100 probe. At 4096²
# M = 64-128 the sweep picks it on GPU time; eagerly its three launches and two host descriptors outweighed a
# ~20 µs layer (0.67x against the pointer GEMM's 1.00-1.07x; round 20) until launch plans replayed descriptor
# launches flat. Since round 28 the H100 table has it at 4096² M = 128 (1.13x eagerly) and keeps the pointer GEMM
# at M = 64, where the two were level: notes/int8_dynamic.md.)
_MID_CANDIDATES = [_two_pass(64, 64, 128, 4, 4), _two_pass(128, 128, 128, 8, 4),
                   _two_pass(128, 128, 128, 8, 4, split_k=4),
                   _two_pass(128, 64, 128, 8, 6, mode="gluon", pdl=True, split_k=2),
                   _two_pass(128, 128, 128, 8, 4, pdl=True), _two_pass(128, 128, 128, 8, 4, pdl=True, split_k=4),
                   _two_pass(128, 128, 128, 8, 4, mode="gluon", pdl=True)]
# 16 < M <= 64 (round 32): the decode kernel with 2-4 x tiles of 16 (or 3-8 of 8) a weight tile, in the place of the
# pointer GEMM with 128 x 128 tiles, no split-K and no PDL (in no table). At N <= 2048 it ran 0.91-1.27x of bf16
# where the two-pass GEMM ran 0.64-0.84x; on the 4096- and 14336-wide Llama layers the GEMMs stay ahead.
_MID_DECODE = [_decode(1, 4, dk=128, sub=2, xpf=False), _decode(1, 4, dk=128, sub=2, bm=8, xpf=False)]
# "gluon": kernels/i8_gemm_sm90.py, whose wgmmas stay in flight across K steps (Triton 3.6 waits for each
# int8 wgmma): 11-15 % faster than the Triton GEMMs at M = 1024-4096 on the H100 (notes, round 11).
_LARGE_CANDIDATES = [_two_pass(128, 256, 128, 8, 4, mode="gluon"), _two_pass(256, 128, 128, 8, 4, mode="gluon"),
                     _two_pass(128, 256, 128, 8, 4, mode="gluon", pdl=True),
                     _two_pass(256, 128, 128, 8, 4, mode="gluon", pdl=True),
                     _two_pass(128, 128, 128, 8, 5, mode="gluon_ws", epi="tma"),
                     _two_pass(256, 128, 128, 8, 3, mode="gluon_ws", epi="tma")]
# "gluon_ws": the warp-specialized persistent variant (a load warp, two consumer warpgroups): 10 % faster at
# 14336 x 4096, M = 1024 with 128 x 128 tiles, within a few % elsewhere (round 12 probe). It took the place
# of the TMA kernel with PDL, which no sweep picked at M >= 1024. Its output tiles leave by TMA stores that
# overlap the next tile's K loop (round 17 probe: the layer 0.3-6 % faster than with row stores in all six
# cells at M = 1024 / 4096; 256 x 128 tiles 8.7 % faster than the shipped GEMM at 14336 x 4096, M = 4096).
# The 256 x 128 one took the place of the Triton TMA kernel at 128 x 256, which no sweep picked on the H100
# and which the "gluon" configs run anyway where Gluon cannot.


def candidate_configs(M: int, N: int, K: int) -> list[dict]:
    """The offline sweep's search space for an [M, K] x [N, K]^T problem (the default included)."""
    if M == 1:
        return list(_GEMV_CANDIDATES)
    if M <= 4:
        return list(_DECODE_4_CANDIDATES)
    if M <= 16:
        return list(_FUSED_CANDIDATES)
    if M <= 64:
        return _MID_DECODE + [c for c in _MID_CANDIDATES if c != _two_pass(128, 128, 128, 8, 4)]
    if M <= 256:
        return list(_MID_CANDIDATES)
    return list(_LARGE_CANDIDATES)


def make_bench_inputs(N: int, K: int, dtype: torch.dtype = torch.bfloat16) -> tuple:
    """(weight_q, weight_scale, bias) on CUDA for the sweep: weights ~ N(0, 0.02²), no bias (as bf16's
    F.linear baseline in PERFORMANCE.md)."""
    w = torch.randn(N, K, device="cuda", dtype=dtype) * 0.02
    weight_q, weight_scale = quantize_weight(w)
    return weight_q, weight_scale, None


# --------------------------------------------------------------------------- launchers
def _quant_rows_into(t: torch.Tensor, q: torch.Tensor, stride_q: int, s: torch.Tensor, s_off: int,
                     block_k: int | None = None, launch_dependents: bool = False, block_r: int | None = None,
                     warps: int | None = None) -> None:
    """Quantize the rows of ``t`` [R, K]: codes into ``q`` (row stride ``stride_q``), float32 scales
    at element ``s_off`` of ``s`` (a float32 tensor, or the int8 workspace with a byte offset).
    ``block_k``, ``block_r``, ``warps``: the launch shape (K chunk, rows a program, warps), chosen from
    R and K when not given; every shape writes the same codes and scales."""
    R, K = t.shape
    if block_k is None:
        block_k = triton.next_power_of_2(K) if K <= _SINGLE_PASS_MAX_K else 8192
    single = block_k >= K
    if block_r is None and warps is None and single and block_k >= 4096 and R >= 1024:
        # Large M: one row a program, 32 elements a thread (K = 4096: 4 warps). At M = 2048-4096 this
        # beat two rows and 16 elements a thread by 6-10 % (H100 probe, notes/int8_dynamic.md, round 10);
        # at K = 14336 it is the general rule's own shape (one row, 16 warps).
        block_r, warps = 1, min(16, block_k // 1024)
    # The general rule: <= 8K elements per program (16 a thread at 16 warps: two 16-byte loads of
    # bf16), but at least ~128 programs when there are rows enough.
    if block_r is None:
        block_r = max(1, min(8192 // block_k, triton.next_power_of_2(max(1, R // 128))))
    if warps is None:
        warps = max(1, min(16, block_r * block_k // 512))
    _quant_rows_fast[(ceil_div(R, block_r),)](
        t, q, s, s_off, R, _loop_bound(K), t.stride(0), stride_q, EPS=AMAX_EPS, BLOCK_R=block_r, BLOCK_K=block_k,
        SINGLE_PASS=single, LAUNCH_DEPENDENTS=launch_dependents, COMPILED=_COMPILED, num_warps=warps)


def _quant_rows_launch(t: torch.Tensor, block_k: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    R, K = t.shape
    if K == 0:
        raise ValueError("cannot quantize rows of length 0 (K = 0)")
    q = torch.empty((R, K), dtype=torch.int8, device=t.device)
    s = torch.empty((R,), dtype=torch.float32, device=t.device)
    if R > 0:
        _quant_rows_into(t, q, K, s, 0, block_k)
    return q, s


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` [N, K] float -> (int8 [N, K], float32 scale [N]), one symmetric scale per output channel."""
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D [out, in], got shape {tuple(weight.shape)}")
    if weight.stride(-1) != 1:
        weight = weight.contiguous()  # one-off, at load time
    _check_rows(weight, "weight", _FLOAT_DTYPES)
    return _quant_rows_launch(weight)


def quantize_act(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [M, K] float -> (int8 [M, K], float32 scale [M]), one symmetric scale per token."""
    _check_rows(x, "x", _FLOAT_DTYPES)
    return _quant_rows_launch(x)


def _reduce_launch(part, part_off, splits, a_scale, a_scale_off, weight_scale, bias, out, M, N, pdl) -> None:
    """The split-K partials [splits, M, N] (int32 at byte ``part_off`` of ``part``) summed, scaled and
    rounded into ``out`` (``pdl``: launched as the GEMM's programmatic dependent)."""
    rb_m, rb_n = 32, 128
    reduce_opts = dict(num_warps=4, enable_fp_fusion=False)
    if pdl:
        reduce_opts["launch_pdl"] = True
    _splitk_reduce_fast[(ceil_div(M, rb_m), ceil_div(N, rb_n))](
        part, part_off, a_scale, a_scale_off, weight_scale, bias if bias is not None else weight_scale, out, M, N,
        out.stride(0), SPLIT_K=splits, HAS_BIAS=bias is not None, BLOCK_M=rb_m, BLOCK_N=rb_n, WAIT_PRIOR=pdl,
        **reduce_opts)


def _gemm_launch(a, stride_a, a_scale, a_scale_off, weight_q, weight_scale, bias, out, M, N, K,
                 config: dict, pdl: bool = False, part=None, part_off: int = 0) -> torch.Tensor:
    """The GEMM on quantized activations: ``a`` holds the codes (row stride ``stride_a``), the float32
    row scales start at element ``a_scale_off`` of ``a_scale``; split-K partials (int32 [SPLIT_K, M,
    N]) go at byte ``part_off`` of the int8 tensor ``part``."""
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    tiles = ceil_div(M, bm) * ceil_div(N, bn)
    bias_arg = bias if bias is not None else weight_scale  # never read when HAS_BIAS is False
    common = dict(HAS_BIAS=bias is not None, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=config["GROUP_M"],
                  WAIT_PRIOR=pdl, num_warps=config["num_warps"], num_stages=config["num_stages"],
                  enable_fp_fusion=False)
    if pdl:
        common["launch_pdl"] = True
    mode = config["mode"]
    split = config["SPLIT_K"]
    if split > 1 and part is None:
        part = torch.empty(split * M * N * 4, dtype=torch.int8, device=a.device)
    if mode in ("gluon", "gluon_ws"):
        from quantkit.kernels import i8_gemm_sm90

        if i8_gemm_sm90.usable(a, stride_a, K, weight_q):
            if mode == "gluon_ws":  # (SPLIT_K 1: _check_config)
                i8_gemm_sm90.launch_ws(a, stride_a, a_scale, a_scale_off, weight_q, weight_scale, bias, out, M, N, K,
                                       config, pdl=pdl)
                return out
            splits = i8_gemm_sm90.launch(a, stride_a, a_scale, a_scale_off, weight_q, weight_scale, bias, out, M, N,
                                         K, config, pdl=pdl, part=part, part_off=part_off)
            if splits > 1:
                _reduce_launch(part, part_off, splits, a_scale, a_scale_off, weight_scale, bias, out, M, N, pdl)
            return out
        # (not sm_90, or operands TMA cannot take: the Triton kernels below decide; split-K is the pointer
        # kernel's)
        mode = "pointer" if split > 1 else "tma"
    if mode == "persistent" and out.element_size() == 4 and bm * bn * config["num_stages"] > 128 * 128 * 4:
        # The persistent kernel keeps its epilogue tile in shared memory on top of the operand
        # stages; a float32 output tile of 128x256 with 3 stages needs 272 KB (an H100 has 227 KB).
        mode = "tma"
    if mode != "pointer":
        tma_ok, sms = _facts(a)
        # host TMA descriptors: 16-byte aligned bases and row strides (the workspace pads K to 16)
        if not (tma_ok and K % 16 == 0 and stride_a % 16 == 0 and a.data_ptr() % 16 == 0
                and weight_q.data_ptr() % 16 == 0):
            mode = "pointer"
    if mode == "pointer":
        k_blocks = ceil_div(K, bk)
        k_iters = ceil_div(k_blocks, split)
        even_k = K % bk == 0 and k_iters * split == k_blocks
        _gemm_fast[(tiles, split)](
            a, a_scale, a_scale_off, weight_q, weight_scale, bias_arg, out if split == 1 else part, part_off,
            M, N, _loop_bound(K), stride_a, out.stride(0), _loop_bound(k_iters), SPLIT_K=split, EVEN_K=even_k,
            **common)
        if split > 1:
            _reduce_launch(part, part_off, split, a_scale, a_scale_off, weight_scale, bias, out, M, N, pdl)
        return out
    from triton.tools.tensor_descriptor import TensorDescriptor

    a_desc = TensorDescriptor(a, [M, K], [stride_a, 1], [bm, bk])
    b_desc = TensorDescriptor(weight_q, [N, K], [K, 1], [bn, bk])
    if mode == "tma":
        _gemm_tma_fast[(tiles,)](a_desc, a_scale, a_scale_off, b_desc, weight_scale, bias_arg, out, M, N,
                                 _loop_bound(K), out.stride(0), **common)
    else:
        progs = min(tiles, sms)
        _gemm_persistent_fast[(progs,)](a_desc, a_scale, a_scale_off, b_desc, weight_scale, bias_arg, out, M, N,
                                        _loop_bound(K), out.stride(0), _loop_bound(tiles), _loop_bound(progs),
                                        COMPILED=_COMPILED, **common)
    return out


def gemm(x_q: torch.Tensor, x_scale: torch.Tensor, weight_q: torch.Tensor, weight_scale: torch.Tensor,
         bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16, *,
         config: dict | None = None) -> torch.Tensor:
    """y = (int32(x_q @ weight_q^T) * x_scale[:, None]) * weight_scale[None, :] (+ bias), as ``out_dtype``."""
    _check_rows(x_q, "x_q", (torch.int8,))
    M, K = x_q.shape
    _check_k(K)
    N = _check_weight(weight_q, weight_scale, K, x_q.device)
    if x_scale.shape != (M,) or x_scale.dtype != torch.float32 or not x_scale.is_contiguous():
        raise ValueError(f"x_scale must be a contiguous float32 [M={M}] tensor, got {x_scale.dtype} "
                         f"{tuple(x_scale.shape)}")
    if x_scale.device != x_q.device:
        raise ValueError(f"x_scale is on {x_scale.device} but x_q is on {x_q.device}")
    _check_bias(bias, N, x_q.device)
    if out_dtype not in _FLOAT_DTYPES:
        raise TypeError(f"out_dtype must be bfloat16, float16 or float32, got {out_dtype}")
    if M == 0 or N == 0:
        return torch.empty((M, N), dtype=out_dtype, device=x_q.device)
    if config is None or config.get("kernel") != "two_pass":
        config = _gemm_default(max(M, 17), N, K)
    _check_config(config)
    split = config["SPLIT_K"]
    if split == 1:
        out = torch.empty((M, N), dtype=out_dtype, device=x_q.device)
        return _gemm_launch(x_q, x_q.stride(0), x_scale, 0, weight_q, weight_scale, bias, out, M, N, K, config)
    # The split-K int32 partials behind the output, in its allocation (one allocation a call).
    out, ws = out_with_workspace(M, N, out_dtype, x_q.device, split * M * N * 4)
    return _gemm_launch(x_q, x_q.stride(0), x_scale, 0, weight_q, weight_scale, bias, out, M, N, K, config,
                        part=ws.view(torch.int8))


def _bench_fn(x, weight_q, weight_scale, bias):
    def bench(config: dict) -> float:
        import triton.testing

        fn = lambda: linear(x, weight_q, weight_scale, bias, config=config)  # noqa: E731
        fn()
        return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")

    return bench


def _amax_block(K: int, rows: int) -> int:
    # The GEMV: the row in one or two wide loads. The fused kernel: 16 x 256 chunks in a pipelined
    # loop (16-32 values a thread, three chunks in flight).
    return min(triton.next_power_of_2(K), 8192 if rows == 1 else 256)


#: the warp-specialized Gluon GEMM in 128 x 128 tiles: low in an M bucket (:func:`fit_rows`)
LOW_IN_BUCKET_CONFIG = _two_pass(128, 128, 128, 8, 5, mode="gluon_ws", epi="tma")


def fit_rows(config: dict, M: int) -> dict:
    """A Gluon config from a table (keyed by M's power-of-two bucket, tuned at its top: M = 1024, 2048, 4096) made fit
    for M low in its bucket, where that entry's tiles leave a partial wave or mostly-padded tiles: for 256 < M <= 512
    (no entry of their own: the nearest is M = 1024's) and for 1024 < M <= 1400 (the lowest 68 % of the M = 2048
    bucket), :data:`LOW_IN_BUCKET_CONFIG`. Measured on an H100 (GPU time from CUDA graphs, 4096², 14336 x 4096,
    4096 x 14336; notes/int8_dynamic.md, round 39): at M = 300, 384, 1100 and 1300 as fast (within 1 %) or 11-40 %
    faster than the table's config in 12 of 12 problems (call 11); at M = 1332 and 1400 13-22 % faster in 5 of 5 (calls
    12-13); 1.20-1.47x of bf16 at M = 480 and 512 (call 12). Not applied: at M = 530 and 600 (low in the M = 1024
    bucket) it was 5-30 % slower on two of the shapes, and at M = 2600 9-12 % slower than the M = 4096 entry on 4096 x
    14336 (call 12), though 4-16 % faster at 2100."""
    if config.get("mode") not in ("gluon", "gluon_ws"):
        return config
    if 256 < M <= 512 or 1024 < M <= 1400:
        return LOW_IN_BUCKET_CONFIG
    return config


def linear(x: torch.Tensor, weight_q: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None = None,
           *, config: dict | None = None) -> torch.Tensor:
    """The whole Int8DynamicLinear forward on ``x`` [M, K]: per-token quantization + scaled int8 GEMM."""
    _check_rows(x, "x", _FLOAT_DTYPES)
    M, K = x.shape
    _check_k(K)
    device = x.device
    N = _check_weight(weight_q, weight_scale, K, device)
    _check_bias(bias, N, device)
    if M == 0 or N == 0:
        return torch.empty((M, N), dtype=x.dtype, device=device)
    if config is None:
        if device.type == "cuda":
            config = get_config(FAMILY, M, N, K, module=sys.modules[__name__],
                                bench=_bench_fn(x, weight_q, weight_scale, bias))
            if M > 256:
                config = fit_rows(config, M)
        else:
            config = default_config(M, N, K)
    _check_config(config)
    kind = config["kernel"]
    if kind == "decode":
        from quantkit.kernels import aq_decode_sm90

        if aq_decode_sm90.usable(x, weight_q, config):  # (K <= MAX_K: _check_k)
            return _decode_launch(x, weight_q, weight_scale, bias, config, aq_decode_sm90)
        config = _gemm_default(M, N, K)
        kind = config["kernel"]
    bias_arg = bias if bias is not None else weight_scale  # never read when HAS_BIAS is False
    bn, bk = config["BLOCK_N"], config["BLOCK_K"]
    if kind != "two_pass":
        out = torch.empty((M, N), dtype=x.dtype, device=device)

    if kind == "gemv":
        # one program column per row of x: meant for M = 1 (any M works, each row re-reads the weight)
        _gemv_fast[(ceil_div(N, bn), M)](
            x, weight_q, weight_scale, bias_arg, out, N, _loop_bound(K), x.stride(0), out.stride(0),
            EPS=AMAX_EPS, HAS_BIAS=bias is not None, BLOCK_N=bn, BLOCK_K=bk, AMAX_BLOCK=_amax_block(K, 1),
            STAGES=config["num_stages"], EVEN_K=K % bk == 0, COMPILED=_COMPILED, num_warps=config["num_warps"],
            enable_fp_fusion=False)
        return out

    if kind == "stream":
        bm = min(config["BLOCK_M"], triton.next_power_of_2(M))
        _fused_stream_fast[(ceil_div(N, bn), ceil_div(M, bm))](
            x, weight_q, weight_scale, bias_arg, out, M, N, _loop_bound(K), x.stride(0), out.stride(0),
            EPS=AMAX_EPS, HAS_BIAS=bias is not None, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SLICES=config["num_warps"],
            AMAX_BLOCK=_amax_block(K, 16), AMAX_STAGES=3, EVEN_K=K % (bk * config["num_warps"]) == 0,
            COMPILED=_COMPILED, num_warps=config["num_warps"], num_stages=config["num_stages"],
            enable_fp_fusion=False)
        return out

    if kind == "fused":
        _fused_dot_fast[(ceil_div(N, bn), ceil_div(M, 16))](
            x, weight_q, weight_scale, bias_arg, out, M, N, _loop_bound(K), x.stride(0), out.stride(0),
            EPS=AMAX_EPS, HAS_BIAS=bias is not None, BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk,
            AMAX_BLOCK=_amax_block(K, 16), AMAX_STAGES=3, EVEN_K=K % bk == 0, COMPILED=_COMPILED,
            num_warps=config["num_warps"], num_stages=config["num_stages"], enable_fp_fusion=False)
        return out

    # two_pass: one workspace behind the output, in its allocation: the codes [M, Kp] int8, the row scales
    # [M] float32, then the split-K int32 partials [SPLIT_K, M, N] if any (16-byte aligned pieces).
    kp = (K + 15) // 16 * 16
    part_off = (M * kp + 4 * M + 15) // 16 * 16
    split = config["SPLIT_K"]
    out, ws = out_with_workspace(M, N, x.dtype, device, part_off + (split * M * N * 4 if split > 1 else 0))
    ws = ws.view(torch.int8)
    pdl = config["pdl"] and _COMPILED and _facts(x)[0]
    _quant_rows_into(x, ws, kp, ws, M * kp, launch_dependents=pdl)
    return _gemm_launch(ws, kp, ws, M * kp, weight_q, weight_scale, bias, out, M, N, K, config, pdl, ws, part_off)


def _decode_launch(x, weight_q, weight_scale, bias, config, aq) -> torch.Tensor:
    """M <= 64 on sm_90: the codes [M, Kp] and row scales [M] into a workspace behind the output (one
    allocation), then the decode kernel, launched while the quantization runs when ``PDL``."""
    M, K = x.shape
    kp = ceil_div(K, 16) * 16
    out, ws = out_with_workspace(M, weight_q.shape[0], x.dtype, x.device, M * kp + 4 * M)
    codes = ws[:M * kp].view(torch.int8).view(M, kp)[:, :K]
    scales = ws[M * kp:].view(torch.float32)
    pdl = config["PDL"] and _COMPILED  # (the interpreted quantization kernel has no grid control)
    _quant_rows_into(x, codes, kp, scales, 0, launch_dependents=pdl)
    aq.launch(codes, scales, 1, 0, weight_q, weight_scale, bias, out, config, fp8=False, pdl=pdl)
    return out
