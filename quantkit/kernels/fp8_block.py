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
                            GEMM path writes them K-major, [ceil(K/b), M], so GEMMs load them coalesced).
  * ``_weight_quant_kernel`` / ``_weight_dequant_kernel``: one program per b×b block.
  * ``_gemm_swap_kernel``   decode and mid-size M ("swap AB"): yᵀ tile [BLOCK_W, BLOCK_X] = W · xᵀ, so
                            the weight rows are the MMA's M side and BLOCK_X (4..128: a thinner x tile
                            is not pipelined by Triton) only pads to the MMA's N granularity. One program streams BLOCK_W weight rows over the whole
                            K, GROUPS quantization blocks per loop step (a step moves BLOCK_W·b·GROUPS
                            weight bytes, pipelined num_stages deep). ``FUSE`` quantizes the activation
                            tile in registers inside the loop (one launch, nothing allocated but y).
  * ``_gemm_stream_kernel`` decode: the swap kernel's yᵀ tile with each step's K blocks spread over the
                            warps (a 3-D dot, one K block per warp, mma.sync on float16 copies of the
                            codes, exact products), summed once at the end: 16–32-row weight tiles keep
                            N/16–N/32 programs of several independent load chains each, where the
                            64-row wgmma swap kernel leaves half the SMs idle at N = 4096. Always fused
                            at decode sizes (``FUSE``); also runs on pre-quantized codes.
  * ``_gemv_kernel``        decode on CUDA cores: fp32 multiply-adds of e4m3 codes converted in
                            registers, x quantized in the weight tile's layout (no shared memory, no
                            barrier); each step issues all its loads first, so the bytes in flight are
                            BLOCK_W·b·GROUPS per program.
  * ``_gemm_tiled_kernel``  large M: y tile [BLOCK_M, BLOCK_N] = x_q · Wᵀ from the codes of a separate
                            ``_act_quant_kernel`` pass, pipelined K loop, grouped launch order,
                            optional host TMA descriptors (sm_90). BLOCK_N ≤ b, so a tile has one
                            weight scale per K block: the promotion is one FFMA per accumulator.
  * ``gluon`` config (M > 64, sm_90): the same GEMM as the Gluon kernel of
                            :mod:`quantkit.kernels.f8_gemm_sm90` (a load warp and two consumer
                            warpgroups, persistent), bit-identical to the tiled kernel and ~1.5x
                            faster; the tiled kernel runs where it cannot. At M = 65–256 with 64-wide
                            tiles, launched while the quantization runs (PDL): 4–21 % faster than the
                            swap kernel at M = 128 on the H100.
  Both GEMMs prefetch the next step's scales one iteration ahead (Triton pipelines the tiles feeding
  the MMA, not these small loads, whose latency would otherwise sit between the MMA and its FFMA).
  * ``cublas`` config (M > 256): ``_act_quant_kernel`` as above, then cuBLAS's block-scaled fp8 GEMM
                            (``torch._scaled_mm`` with the same codes and scales; its K-major
                            activation scales are the layout written here). Chosen per cell by the
                            tuned table where it measures faster than the tiled kernel (H100: M ≥ 1024,
                            1.4–1.6x the tiled kernel); it promotes per K block in float32 as the
                            reference does (outputs within the same bound, GPU-tested). Where cuBLAS
                            refuses a problem (M not a multiple of 4, a float32 output with a bias)
                            our GEMM runs; ``QUANTKIT_FP8_CUBLAS=0`` keeps every GEMM our own.

  * ``decode`` config (M ≤ 16, to 64 where a table picks it; sm_90): ``_act_quant_kernel`` writes the codes and
                            K-major scales once, then the Gluon kernel of :mod:`quantkit.kernels.aq_decode_sm90`
                            multiplies them with the weight (``mma.sync`` e4m3, the loaded bytes are the fragments,
                            one scale product per K chunk), launched as a programmatic dependent of the quantization
                            so that its first weight loads overlap it.

Per call: one allocation, the output's. The separate-quantization path (``fuse_act_quant`` false, only
for M > 16) keeps the e4m3 codes and K-major scales of x behind the output, in its allocation, as the
``decode`` path does, and with them a split-K swap config's float32 partials (the block lives as long as
the output); the cuBLAS path writes into that output too (``_scaled_mm(out=...)``). No host synchronization;
every launch goes through :func:`quantkit.kernels.launch.cached`.

The activation quantizers divide with ``_div_exact`` (reciprocal, multiply and two fused-multiply-add
corrections: Markstein's theorem makes the result the correctly rounded quotient) instead of the
dearer ``div_rn``, on the GPU (tested bit-exact there); under the interpreter, whose fma is not
fused, they use ``div_rn``. Scales themselves are ``div_rn(amax, 448)`` (``div.rn.f32``), i.e. IEEE.

Layouts: x [M, K] with unit stride along K; weight codes [N, K] contiguous e4m3; weight scales
float32 [ceil(N/b), ceil(K/b)] (any strides); bias [N]; y [M, N] contiguous in x's dtype (``gemm``:
``out_dtype``). N, K need not be multiples of b or of any tile: edges are masked (masked lanes load 0,
which cannot raise an amax, and a masked weight scale of 0 zeroes a block past K). Limits: b a power
of two in [16, 256]; non-finite inputs give non-finite outputs but not necessarily the reference's
pattern of NaNs.
"""
from __future__ import annotations

import functools
import os
import sys

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from quantkit.kernels.configs import check_keys, is_pow2, key_sets
from quantkit.kernels.launch import cached
from quantkit.kernels.workspace import out_with_workspace
from quantkit.kernels.tiling import grouped_pid, split_plan
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
def _div_exact(x, scale, ON_GPU: tl.constexpr, ZERO_SIGN: tl.constexpr = True):
    """x [R, C] / scale [R] (per row), the correctly rounded float32 quotient (see ``_div_exact_b``)."""
    return _div_exact_b(x, scale[:, None], ON_GPU, ZERO_SIGN)


@triton.jit
def _div_exact_b(x, scale, ON_GPU: tl.constexpr, ZERO_SIGN: tl.constexpr = True):
    """x / scale with ``scale`` already shaped to broadcast against x (one value per group), the
    correctly rounded float32 quotient. ON_GPU: compiled (fused fma); the interpreter's fma is a
    separate multiply and add, so it divides with div_rn.
    ZERO_SIGN=False lets −0 come out as +0 (the corrections lose its sign): fine where the codes only
    feed a dot product, saving two instructions per element in the GEMMs' fused quantization."""
    if ON_GPU:
        # r = RN(1/s), q0 = RN(x·r) is within 1.5 ulp of x/s; one fma correction q1 = q0 + (x − s·q0)·r
        # makes it faithful (within 1 ulp), and then Markstein's theorem makes the second correction
        # exact: its residual x − s·q1 is exact in the fma and RN(q1 + residual·r) = RN(x/s), barring
        # underflow. The AMAX_EPS floor keeps s ≥ 2^-49, so every x whose quotient could round to a
        # nonzero code (|x/s| ≥ 2^-11) has |x| ≥ 2^-60 and normal residuals (≈ |x|·2^-24); smaller
        # quotients give a zero code anyway. |q| ≤ 448 and r ≤ 2^49: nothing overflows.
        # The residual x − s·q is written fma(q, −s, x): the same exactly rounded value, with the
        # negation paid once per group instead of once per element.
        neg_s = -scale
        r = tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)
        q0 = x * r
        q1 = tl.fma(tl.fma(q0, neg_s, x), r, q0)
        q = tl.fma(tl.fma(q1, neg_s, x), r, q1)
        if ZERO_SIGN:
            q = tl.where(q0 == 0.0, q0, q)  # keep the sign of a zero (−0/s is −0)
    else:
        q = tl.math.div_rn(x, tl.broadcast_to(scale, x.shape))
    return q


@triton.jit
def _quantize_rows(x, UE8M0: tl.constexpr, ON_GPU: tl.constexpr, ZERO_SIGN: tl.constexpr = True):
    """x [R, G] float32 (one group per row) -> (e4m3 codes [R, G], scales [R])."""
    scale = _scale_from_amax(tl.max(tl.abs(x), axis=1), UE8M0)
    q = _div_exact(x, scale, ON_GPU, ZERO_SIGN)
    if not ON_GPU:
        # On the GPU the conversion is cvt.rn.satfinite, which saturates at ±448 by itself: the
        # reference's clamp changes nothing there (|q| ≤ 448·(1 + 2^-23) rounds to 448 either way).
        q = tl.minimum(tl.maximum(q, -_FP8_MAX), _FP8_MAX)
    return q.to(tl.float8e4nv), scale


# ============================================================================ quantizers
@triton.jit
def _act_quant_kernel(x_ptr, q_ptr, s_ptr, M, K, stride_xm, stride_qm, stride_sm, stride_sg, GROUPS,
                      BLOCK_M: tl.constexpr, GROUP: tl.constexpr, GPP: tl.constexpr, UE8M0: tl.constexpr,
                      ON_GPU: tl.constexpr, LAUNCH_DEPENDENTS: tl.constexpr = False):
    """One program: BLOCK_M rows × GPP groups of GROUP columns, on a 1-D grid with the group blocks
    fastest, so that neighbouring programs read neighbouring columns of the same rows (at M ≥ 1024
    2-5 % faster on the H100 than row blocks fastest, round 18). LAUNCH_DEPENDENTS: the GEMM launched
    after it with programmatic dependent launch may be scheduled now (it waits for this grid's
    completion before reading the codes)."""
    if LAUNCH_DEPENDENTS:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    group_blocks = tl.cdiv(GROUPS, GPP)
    g0 = (pid % group_blocks) * GPP
    pid_m = pid // group_blocks
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = g0 * GROUP + tl.arange(0, GPP * GROUP)
    mask = (offs_m[:, None] < M) & (offs_k[None, :] < K)
    x = tl.load(x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :], mask=mask, other=0.0)
    # one group a row for the quantizer: [BLOCK_M, GPP·GROUP] -> [BLOCK_M·GPP, GROUP] and back
    q, scale = _quantize_rows(tl.reshape(x.to(tl.float32), [BLOCK_M * GPP, GROUP]), UE8M0, ON_GPU)
    tl.store(q_ptr + offs_m[:, None].to(tl.int64) * stride_qm + offs_k[None, :],
             tl.reshape(q, [BLOCK_M, GPP * GROUP]), mask=mask)
    offs_g = g0 + tl.arange(0, GPP)
    tl.store(s_ptr + offs_m[:, None] * stride_sm + offs_g[None, :] * stride_sg, tl.reshape(scale, [BLOCK_M, GPP]),
             mask=(offs_m[:, None] < M) & (offs_g[None, :] < GROUPS))


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
def _gemv_kernel(
    x_ptr, w_ptr, ws_ptr, bias_ptr, y_ptr,
    N, K,
    stride_xm, stride_wn, stride_wsn, stride_wsk, stride_ym,
    BLOCK_W: tl.constexpr, BLOCK_K: tl.constexpr, GROUPS: tl.constexpr,
    HAS_BIAS: tl.constexpr, UE8M0: tl.constexpr, ON_GPU: tl.constexpr,
):
    """y[row, BLOCK_W] for one activation row (program axis 1) on CUDA cores, quantizing x on the fly.

    Each step first issues the loads of GROUPS K blocks (weights, x, scales: BLOCK_W·b·GROUPS weight
    bytes in flight per program), then quantizes and multiplies. x is read through pointers broadcast
    over the BLOCK_W rows, so it lives in the weight tile's register layout: the group's amax is a
    warp-local reduction and the codes meet the weights without a shared-memory round trip or a
    barrier. The price: each thread quantizes the values of its own K slice, again in every thread that
    holds another weight row of the same slice (notes/fp8_block.md counts the instructions)."""
    pid_w = tl.program_id(0)
    row = tl.program_id(1)
    offs_w = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    offs_kk = tl.arange(0, BLOCK_K)
    mask_w = offs_w < N
    w_ptrs = w_ptr + offs_w[:, None].to(tl.int64) * stride_wn + offs_kk[None, :]
    x_ptrs = x_ptr + row.to(tl.int64) * stride_xm + offs_kk[None, :] + tl.zeros([BLOCK_W, 1], dtype=tl.int32)
    ws_row = ws_ptr + ((pid_w * BLOCK_W) // BLOCK_K) * stride_wsn
    STEP: tl.constexpr = BLOCK_K * GROUPS
    acc = tl.zeros([BLOCK_W], dtype=tl.float32)
    for k0 in range(0, K, STEP):
        w_t = ()
        x_t = ()
        s_t = ()
        for g in tl.static_range(GROUPS):
            kg = k0 + g * BLOCK_K
            in_k = (kg + offs_kk < K)[None, :]
            w_t = w_t + (tl.load(w_ptrs + kg, mask=mask_w[:, None] & in_k, other=0.0, eviction_policy="evict_first"),)
            x_t = x_t + (tl.load(x_ptrs + kg, mask=in_k, other=0.0),)
            s_t = s_t + (tl.load(ws_row + (kg // BLOCK_K) * stride_wsk, mask=kg < K, other=0.0),)
        for g in tl.static_range(GROUPS):
            xq, x_s = _quantize_rows(x_t[g].to(tl.float32), UE8M0, ON_GPU, False)
            # e4m3 × e4m3 products are exact in float32; the group's sum is float32 like the MMA's.
            p = tl.sum(w_t[g].to(tl.float32) * xq.to(tl.float32), axis=1)
            acc = tl.fma(p, x_s * s_t[g], acc)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_w, mask=mask_w, other=0.0).to(tl.float32)
    tl.store(y_ptr + row.to(tl.int64) * stride_ym + offs_w, acc.to(y_ptr.dtype.element_ty), mask=mask_w)


@triton.jit
def _gemm_swap_kernel(
    x_ptr, xs_ptr, w_ptr, ws_ptr, bias_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_xsm, stride_xsk, stride_wn, stride_wsn, stride_wsk, stride_ym,
    BLOCK_W: tl.constexpr, BLOCK_X: tl.constexpr, BLOCK_K: tl.constexpr, GROUPS: tl.constexpr,
    FUSE: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, UE8M0: tl.constexpr, ON_GPU: tl.constexpr,
    W_EVICT: tl.constexpr = "", SPLIT_K: tl.constexpr = 1, k_span=1, WAIT_PRIOR: tl.constexpr = False,
    LAUNCH_DEPENDENTS: tl.constexpr = False,
):
    """yᵀ[BLOCK_W, BLOCK_X] = W[BLOCK_W, K] · x[BLOCK_X, K]ᵀ; BLOCK_W divides b (one weight scale row).

    Program order is x-tile fastest, so the programs sharing a weight slice run together (one HBM read).
    EVEN_K: K is a multiple of the step BLOCK_K·GROUPS (no K masks). W_EVICT: the weight loads' L2
    eviction policy ("evict_first" where one x tile covers M, so that each weight byte is read once).
    SPLIT_K > 1 (grid axis 1): split s multiplies K [s·k_span, (s + 1)·k_span), whole steps (the host makes
    the splits even, so that EVEN_K holds in each) and stores its float32 partial sums, without bias,
    at [s, M, N] of ``y_ptr`` (``_splitk_sum_kernel`` adds them). Its pointers start at its first
    step, so the loop itself runs from 0 as in the unsplit kernel (and K stays a loop bound the
    interpreter accepts). WAIT_PRIOR: launched as a programmatic dependent of the quantization (PDL),
    it waits for that grid before any load; LAUNCH_DEPENDENTS: the split-K sum kernel may be scheduled
    once this program's K loop is done."""
    if WAIT_PRIOR:
        gdc_wait()
    if SPLIT_K == 1:
        k_lim = K
    else:  # this split's K range, as offsets from its first step (scalar bases: the tiles' pointers
        # built from them fold into the loads' addressing as in the unsplit kernel)
        k_lo = tl.program_id(1) * k_span
        x_ptr += k_lo
        w_ptr += k_lo
        xs_ptr += (k_lo // BLOCK_K) * stride_xsk
        ws_ptr += (k_lo // BLOCK_K) * stride_wsk
        k_lim = tl.minimum(K - k_lo, k_span)
    pid = tl.program_id(0)
    num_x = tl.cdiv(M, BLOCK_X)
    pid_x = pid % num_x
    pid_w = pid // num_x
    offs_w = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    offs_x = pid_x * BLOCK_X + tl.arange(0, BLOCK_X)
    offs_kk = tl.arange(0, BLOCK_K)
    mask_w = offs_w < N
    mask_x = offs_x < M
    w_ptrs = w_ptr + offs_w[:, None].to(tl.int64) * stride_wn + offs_kk[None, :]
    x_ptrs = x_ptr + offs_x[:, None].to(tl.int64) * stride_xm + offs_kk[None, :]
    ws_row = ws_ptr + ((pid_w * BLOCK_W) // BLOCK_K) * stride_wsn
    xs_col = xs_ptr + offs_x * stride_xsm
    STEP: tl.constexpr = BLOCK_K * GROUPS

    # The step's scales, fetched one step ahead (tuples of GROUPS values): Triton pipelines the tiles
    # feeding the MMA, not these, and in a short step their latency would sit before the FFMA. Past K
    # a weight scale loads as 0, which zeroes the (all-zero) contribution of a block that is not there.
    ws_next = ()
    xs_next = ()
    for g in tl.static_range(GROUPS):
        ws_next = ws_next + (tl.load(ws_row + g * stride_wsk, mask=g * BLOCK_K < k_lim, other=0.0),)
        if not FUSE:
            xs_next = xs_next + (tl.load(xs_col + g * stride_xsk, mask=mask_x & (g * BLOCK_K < k_lim), other=0.0),)
    acc = tl.zeros([BLOCK_W, BLOCK_X], dtype=tl.float32)
    for k0 in range(0, K if SPLIT_K == 1 else k_span, STEP):
        ws_cur = ws_next
        xs_cur = xs_next
        ws_next = ()
        xs_next = ()
        for g in tl.static_range(GROUPS):
            kn = k0 + STEP + g * BLOCK_K
            ws_next = ws_next + (tl.load(ws_row + (kn // BLOCK_K) * stride_wsk, mask=kn < k_lim, other=0.0),)
            if not FUSE:
                xs_next = xs_next + (tl.load(xs_col + (kn // BLOCK_K) * stride_xsk, mask=mask_x & (kn < k_lim),
                                             other=0.0),)
        for g in tl.static_range(GROUPS):
            kg = k0 + g * BLOCK_K
            if EVEN_K:
                mask_a = mask_x[:, None]
                mask_b = mask_w[:, None]
            else:
                in_k = (kg + offs_kk < k_lim)[None, :]
                mask_a = mask_x[:, None] & in_k
                mask_b = mask_w[:, None] & in_k
            if FUSE:
                xv = tl.load(x_ptrs + kg, mask=mask_a, other=0.0).to(tl.float32)
                xq, x_s = _quantize_rows(xv, UE8M0, ON_GPU, False)
            else:
                xq = tl.load(x_ptrs + kg, mask=mask_a, other=0.0)
                x_s = xs_cur[g]
            w = tl.load(w_ptrs + kg, mask=mask_b, other=0.0, eviction_policy=W_EVICT)
            p = tl.dot(w, tl.trans(xq))
            acc = tl.fma(p, (x_s * ws_cur[g])[None, :], acc)

    if LAUNCH_DEPENDENTS:
        gdc_launch_dependents()
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_w, mask=mask_w, other=0.0).to(tl.float32)[:, None]
    if SPLIT_K > 1:
        y_ptr += tl.program_id(1).to(tl.int64) * M * N
    y_ptrs = y_ptr + offs_x[None, :].to(tl.int64) * stride_ym + offs_w[:, None]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask_w[:, None] & mask_x[None, :])


@triton.jit
def _splitk_sum_kernel(part_ptr, bias_ptr, y_ptr, M, N, stride_ym, SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WAIT_PRIOR: tl.constexpr = False):
    """y = Σ_s part[s] (+ bias) in y's dtype: the split-K partials [SPLIT, M, N] float32, summed in split
    order. WAIT_PRIOR: launched as a programmatic dependent of the GEMM, it waits for that grid first."""
    if WAIT_PRIOR:
        gdc_wait()
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    offs = offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
    acc = tl.load(part_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT):
        acc += tl.load(part_ptr + s * M.to(tl.int64) * N + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + offs_m.to(tl.int64)[:, None] * stride_ym + offs_n[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def _gemm_stream_kernel(
    x_ptr, xs_ptr, w_ptr, ws_ptr, bias_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_xsm, stride_xsk, stride_wn, stride_wsn, stride_wsk, stride_ym,
    BLOCK_W: tl.constexpr, BLOCK_X: tl.constexpr, BLOCK_K: tl.constexpr, SLICES: tl.constexpr,
    FUSE: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, UE8M0: tl.constexpr, ON_GPU: tl.constexpr,
):
    """yᵀ[BLOCK_W, BLOCK_X] like ``_gemm_swap_kernel``, with the K range of each step split among the warps.

    A step covers SLICES consecutive K blocks; they are the batch axis of a 3-D dot, which Triton lays
    over the warps (SLICES == num_warps), so each warp loads, quantizes and multiplies its own block:
    acc[s] += (W[w-tile, block s] · xq[x-tile, block s]ᵀ) · x_scale · w_scale, summed over s once
    after the loop. A program therefore keeps SLICES independent block chains in flight, and the
    weight tile can be as thin as 16 rows (mma.sync), i.e. 4x the programs of the 64-row wgmma swap
    kernel at the same N: at N = 4096 that is 256 programs instead of 64 on 132 SMs. The codes go to
    the tensor cores as float16 (every e4m3 value is exact in float16, and the products are exact in
    the float32 accumulation); the interpreter multiplies them in float32."""
    pid = tl.program_id(0)
    num_x = tl.cdiv(M, BLOCK_X)
    pid_x = pid % num_x
    pid_w = pid // num_x
    offs_w = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    offs_x = pid_x * BLOCK_X + tl.arange(0, BLOCK_X)
    rows_w = tl.minimum(offs_w, N - 1)  # clamped, not masked: every load is in bounds; the store is masked
    rows_x = tl.minimum(offs_x, M - 1)
    offs_s = tl.arange(0, SLICES)
    k_base = offs_s[:, None, None] * BLOCK_K
    k_w = k_base + tl.arange(0, BLOCK_K)[None, None, :]  # [SLICES, 1, BLOCK_K]
    k_x = k_base + tl.arange(0, BLOCK_K)[None, :, None]  # [SLICES, BLOCK_K, 1]
    w_ptrs = w_ptr + rows_w.to(tl.int64)[None, :, None] * stride_wn + k_w  # [SLICES, BLOCK_W, BLOCK_K]
    x_ptrs = x_ptr + rows_x.to(tl.int64)[None, None, :] * stride_xm + k_x  # [SLICES, BLOCK_K, BLOCK_X]
    ws_row = ws_ptr + ((pid_w * BLOCK_W) // BLOCK_K) * stride_wsn
    xs_ptrs = xs_ptr + rows_x[None, :] * stride_xsm + offs_s[:, None] * stride_xsk  # [SLICES, BLOCK_X]
    STEP: tl.constexpr = BLOCK_K * SLICES

    # The weight scales of the step, fetched one step ahead: Triton pipelines the tiles feeding the
    # dot, not these, and their latency would otherwise sit before the FFMA. Past K they load as 0.
    ws_next = tl.load(ws_row + offs_s * stride_wsk, mask=offs_s * BLOCK_K < K, other=0.0)
    acc = tl.zeros([SLICES, BLOCK_W, BLOCK_X], dtype=tl.float32)
    for k0 in range(0, K, STEP):
        ws_cur = ws_next
        kb_next = (k0 + STEP) // BLOCK_K + offs_s
        ws_next = tl.load(ws_row + kb_next * stride_wsk, mask=kb_next * BLOCK_K < K, other=0.0)
        if EVEN_K:
            w = tl.load(w_ptrs + k0, eviction_policy="evict_first")
            xv = tl.load(x_ptrs + k0)
        else:
            w = tl.load(w_ptrs + k0, mask=k_w < K - k0, other=0.0, eviction_policy="evict_first")
            xv = tl.load(x_ptrs + k0, mask=k_x < K - k0, other=0.0)
        if FUSE:
            xv = xv.to(tl.float32)
            x_s = _scale_from_amax(tl.max(tl.abs(xv), axis=1), UE8M0)  # [SLICES, BLOCK_X]
            q = _div_exact_b(xv, x_s[:, None, :], ON_GPU, False)
            if not ON_GPU:
                q = tl.minimum(tl.maximum(q, -_FP8_MAX), _FP8_MAX)
            xq = q.to(tl.float8e4nv)
        else:
            xq = xv
            kb = k0 // BLOCK_K + offs_s
            x_s = tl.load(xs_ptrs + (k0 // BLOCK_K) * stride_xsk, mask=(kb * BLOCK_K < K)[:, None], other=0.0)
        if ON_GPU:
            p = tl.dot(w.to(tl.float16), xq.to(tl.float16))
        else:
            p = tl.dot(w.to(tl.float32), xq.to(tl.float32), input_precision="ieee")
        acc = tl.fma(p, (x_s * ws_cur[:, None])[:, None, :], acc)

    out = tl.sum(acc, axis=0)
    if HAS_BIAS:
        out += tl.load(bias_ptr + rows_w).to(tl.float32)[:, None]
    y_ptrs = y_ptr + offs_x[None, :].to(tl.int64) * stride_ym + offs_w[:, None]
    tl.store(y_ptrs, out.to(y_ptr.dtype.element_ty), mask=(offs_w < N)[:, None] & (offs_x < M)[None, :])


@triton.jit
def _gemm_tiled_kernel(
    x_ptr, x_desc, xs_ptr, w_ptr, w_desc, ws_ptr, bias_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_xsm, stride_xsk, stride_wn, stride_wsn, stride_wsk, stride_ym,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    USE_TMA: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr,
):
    """y[BLOCK_M, BLOCK_N] tile of x_q · Wᵀ; BLOCK_K == b and BLOCK_N divides b (one weight scale)."""
    # Grouped order: GROUP_M row-tiles sweep the N tiles together, so their W tiles are L2 hits.
    pid_m, pid_n = grouped_pid(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_kk = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_kk[None, :]
    w_ptrs = w_ptr + offs_n[:, None].to(tl.int64) * stride_wn + offs_kk[None, :]
    xs_col = xs_ptr + offs_m * stride_xsm
    ws_row = ws_ptr + ((pid_n * BLOCK_N) // BLOCK_K) * stride_wsn

    a_s_next = tl.load(xs_col, mask=mask_m, other=0.0)
    w_s_next = tl.load(ws_row)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kb = k0 // BLOCK_K
        a_s = a_s_next
        w_s = w_s_next
        ahead = k0 + BLOCK_K < K
        a_s_next = tl.load(xs_col + (kb + 1) * stride_xsk, mask=mask_m & ahead, other=0.0)
        w_s_next = tl.load(ws_row + (kb + 1) * stride_wsk, mask=ahead, other=0.0)
        if USE_TMA:
            a = x_desc.load([pid_m * BLOCK_M, k0])
            b = w_desc.load([pid_n * BLOCK_N, k0])
        elif EVEN_K:
            a = tl.load(x_ptrs + k0, mask=mask_m[:, None], other=0.0)
            b = tl.load(w_ptrs + k0, mask=mask_n[:, None], other=0.0)
        else:
            in_k = (k0 + offs_kk < K)[None, :]
            a = tl.load(x_ptrs + k0, mask=mask_m[:, None] & in_k, other=0.0)
            b = tl.load(w_ptrs + k0, mask=mask_n[:, None] & in_k, other=0.0)
        p = tl.dot(a, b.T)
        acc = tl.fma(p, (a_s * w_s)[:, None], acc)

    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


_act_quant_fast = cached(_act_quant_kernel)
_weight_quant_fast = cached(_weight_quant_kernel)
_weight_dequant_fast = cached(_weight_dequant_kernel)
_gemv_fast = cached(_gemv_kernel)
_gemm_swap_fast = cached(_gemm_swap_kernel)
_splitk_sum_fast = cached(_splitk_sum_kernel)
_gemm_stream_fast = cached(_gemm_stream_kernel)
_gemm_tiled_fast = cached(_gemm_tiled_kernel)


# ============================================================================ host side
def _check_block_size(block_size: int) -> None:
    if not isinstance(block_size, int) or block_size < 16 or block_size > 256 or block_size & (block_size - 1):
        raise ValueError(f"fp8_block kernels need block_size a power of two in [16, 256], got {block_size!r} "
                         f"(QUANTKIT_BACKEND=reference runs any block size)")


def _check_scale_fmt(scale_fmt) -> bool:
    if scale_fmt is None:
        return False
    if scale_fmt != "ue8m0":
        raise ValueError(f"scale_fmt must be None or 'ue8m0', got {scale_fmt!r}")
    return True


def _check_2d(t: torch.Tensor, name: str, dtypes, unit_last_stride: bool = True) -> None:
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype in {[str(d) for d in dtypes]}, got {t.dtype}")
    if unit_last_stride and t.stride(1) != 1 and t.shape[1] > 1:
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
    if weight_scale.dtype != torch.float32 or weight_scale.dim() != 2 \
            or weight_scale.shape[0] != -(-n // block_size) or weight_scale.shape[1] != -(-kw // block_size):
        raise ValueError(f"weight_scale must be float32 of shape {(ceil_div(n, block_size), ceil_div(kw, block_size))} "
                         f"for weight {(n, kw)} and block size {block_size}, got {weight_scale.dtype} "
                         f"{tuple(weight_scale.shape)}")
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


def _launch_act_quant(x, q, s, stride_sm, stride_sg, group, ue8m0, launch_dependents=False,
                      block_m: int | None = None, gpp: int | None = None, warps: int = 4) -> None:
    """``block_m`` rows of ``gpp`` groups a program (chosen from the shape when None), ``warps`` warps:
    the launch shape, which changes nothing in the codes and scales."""
    m, k = x.shape
    if m == 0 or k == 0:
        return
    groups = ceil_div(k, group)
    if block_m is None and gpp is None and x.is_cuda and m >= 1024:
        # H100 probe (round 18, scripts/probe_fp8_act_quant.py): 16 rows x 4 groups where that makes
        # >= 1024 programs (M = 2048-4096 at K = 4096, M = 1024 at K = 14336: 1.4-4.5 % faster than the
        # earlier 64 x 1), else one row x 32 groups (M = 1024 at K = 4096: 3.8 %).
        block_m, gpp = (16, 4) if ceil_div(m, 16) * ceil_div(groups, 4) >= 1024 else (1, 32)
        gpp = min(gpp, triton.next_power_of_2(groups))
    gpp = gpp or 1
    if block_m is None:
        # Big inputs: 64 elements per thread (SASS ~17 instructions per element, under the ~28 that
        # 3 TB/s at 3 bytes per element leaves); smaller tiles while that would leave SMs idle.
        block_m = max(1, min(triton.next_power_of_2(m), 8192 // group))
        while x.is_cuda and block_m > 1 and ceil_div(m, block_m) * groups < 256:
            block_m //= 2
    grid = (ceil_div(m, block_m) * ceil_div(groups, gpp),)
    _act_quant_fast[grid](x, q, s, m, k, x.stride(0), q.stride(0), stride_sm, stride_sg, groups,
                          BLOCK_M=block_m, GROUP=group, GPP=gpp, UE8M0=ue8m0, ON_GPU=x.is_cuda,
                          LAUNCH_DEPENDENTS=launch_dependents, num_warps=warps)


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
        _weight_quant_fast[(s.shape[0], s.shape[1])](weight, q, s, n, k, weight.stride(0), q.stride(0),
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
        _weight_dequant_fast[(scale.shape[0], scale.shape[1])](weight_q, scale, w, n, k, weight_q.stride(0),
                                                               scale.stride(0), scale.stride(1), w.stride(0),
                                                               BLOCK=block_size, ROWS=rows, num_warps=4)
    return w


# ---------------------------------------------------------------------------- configs
# A config says which GEMM runs and how:
#   {"kernel": "gemv", "BLOCK_W", "GROUPS", "num_warps", "num_stages" (1), "fuse_act_quant" (True)}
#     CUDA-core decode kernel, one program per (BLOCK_W weight rows, activation row); fused only.
#   {"kernel": "swap", "BLOCK_W", "BLOCK_X", "GROUPS", "fuse_act_quant", "num_warps", "num_stages"}
#     BLOCK_X is the largest x tile: the launcher uses max(4, min(BLOCK_X, next_pow2(M))).
#   {"kernel": "stream", "BLOCK_W", "BLOCK_X", "fuse_act_quant", "num_warps", "num_stages"}
#     one K block per warp and step (num_warps blocks a step); x tile min(BLOCK_X, next_pow2(M)).
#   {"kernel": "tiled", "BLOCK_M", "BLOCK_N", "GROUP_M", "tma", "fuse_act_quant" (False), "num_warps",
#    "num_stages"}
#   {"kernel": "gluon", "BLOCK_M" (128), "BLOCK_N", "GROUP_M", "fuse_act_quant" (False), "num_warps" (8:
#    the two consumer warpgroups), "num_stages", optional "PDL"}
_CONFIG_KEYS = {
    "gemv": ("BLOCK_W", "GROUPS", "fuse_act_quant", "num_warps", "num_stages"),
    "swap": ("BLOCK_W", "BLOCK_X", "GROUPS", "fuse_act_quant", "num_warps", "num_stages"),
    "stream": ("BLOCK_W", "BLOCK_X", "fuse_act_quant", "num_warps", "num_stages"),
    "tiled": ("BLOCK_M", "BLOCK_N", "GROUP_M", "tma", "fuse_act_quant", "num_warps", "num_stages"),
    "cublas": ("fuse_act_quant",),
    "gluon": ("BLOCK_M", "BLOCK_N", "GROUP_M", "fuse_act_quant", "num_warps", "num_stages"),
    "decode": ("MT", "WK", "WM", "DK", "SUB", "BM", "PDL", "fuse_act_quant"),
}
_OPTIONAL_KEYS = {"gemv": (), "swap": ("PDL", "SPLIT_K"), "stream": (), "tiled": ("EPI",), "cublas": (),
                  "gluon": ("PDL", "EPI", "SPLIT_K"), "decode": ("DIAG", "DG", "TILED", "XPF")}
_KINDS = key_sets(_CONFIG_KEYS, _OPTIONAL_KEYS)


def _gemv(bw, groups, warps) -> dict:
    return {"kernel": "gemv", "BLOCK_W": bw, "GROUPS": groups, "fuse_act_quant": True, "num_warps": warps,
            "num_stages": 1}


def _swap(bw, bx, groups, warps, stages, fuse, split_k=1, pdl=False) -> dict:
    """``split_k`` > 1 (quantized x only): the K steps split over that many programs per tile, float32
    partials in a workspace, summed with the bias by a second kernel (optional key, 1 when absent).
    ``pdl`` (quantized x only, sm_90; optional key): the GEMM launched as a programmatic dependent of
    the quantization kernel, the sum kernel as one of the GEMM — their launches overlap the grid
    before them instead of following it."""
    cfg = {"kernel": "swap", "BLOCK_W": bw, "BLOCK_X": bx, "GROUPS": groups, "fuse_act_quant": fuse,
           "num_warps": warps, "num_stages": stages}
    if split_k > 1:
        cfg["SPLIT_K"] = split_k
    if pdl:
        cfg["PDL"] = True
    return cfg


def _stream(bw, bx, warps, stages, fuse=True) -> dict:
    return {"kernel": "stream", "BLOCK_W": bw, "BLOCK_X": bx, "fuse_act_quant": fuse, "num_warps": warps,
            "num_stages": stages}


def _tiled(bm, bn, warps, stages, tma, group_m=8) -> dict:
    return {"kernel": "tiled", "BLOCK_M": bm, "BLOCK_N": bn, "GROUP_M": group_m, "tma": tma,
            "fuse_act_quant": False, "num_warps": warps, "num_stages": stages}


def _gluon(bm, bn, warps, stages, group_m=8, pdl=False, epi="rows", split_k=1) -> dict:
    """Large M, sm_90: the activation quantization kernel, then the Gluon GEMM of
    :mod:`quantkit.kernels.f8_gemm_sm90` (a load warp, two consumer warpgroups that scale their products
    while the other's wgmmas run, persistent; ``pdl``: launched as a programmatic dependent of the
    quantization; ``epi="tma"``: the output tiles leave by TMA stores that overlap the next tile's K
    loop; ``split_k`` > 1: each tile's K blocks split over that many work items, float32 partials behind
    the output, summed with the bias by a second kernel — more programs where tiles are fewer than SMs).
    Where it cannot run (another GPU, K not a multiple of 16, b outside 32–128) the Triton TMA GEMM
    of the same tile runs, without split-K."""
    cfg = {"kernel": "gluon", "BLOCK_M": bm, "BLOCK_N": bn, "GROUP_M": group_m, "fuse_act_quant": False,
           "num_warps": warps, "num_stages": stages}
    if pdl:
        cfg["PDL"] = True
    if epi != "rows":
        cfg["EPI"] = epi
    if split_k > 1:
        cfg["SPLIT_K"] = split_k
    return cfg


def _cublas() -> dict:
    """The activation quantization kernel, then cuBLAS's block-scaled fp8 GEMM (``torch._scaled_mm``
    with 1×128 / 128×128 scales: sm_90 and newer, torch ≥ 2.9). A sweep candidate for M > 256, picked
    where it measures faster, and the default there for large problems with a long K (``_gemm_default``);
    where cuBLAS refuses a problem (or ``QUANTKIT_FP8_CUBLAS=0``) the Triton GEMM runs instead. Not offered
    at M ≤ 256: there the Triton GEMMs are within 0–15 % of it on the GPU, and a cuBLAS call costs the
    eager host 40–60 µs more than a replayed Triton launch (notes/fp8_block.md, round 3)."""
    return {"kernel": "cublas", "fuse_act_quant": False}


def _decode(mt, wk, wm=1, dk=64, sub=1, pdl=True, bm=16, diag=False, xpf=True) -> dict:
    """M ≤ 64 (ceil(M / BM) programs a weight tile), sm_90: the activation quantization kernel writes the codes
    once, then the Gluon decode kernel of :mod:`quantkit.kernels.aq_decode_sm90` (16·MT·WM weight rows a program,
    WK·WM warps, DK-deep K chunks, SUB per warp and trip, at most BM x rows a program; ``pdl``: launched as a
    programmatic dependent of the quantization). Both in one allocation with the output. Where it cannot run
    (another GPU, K not a multiple of DK, b < DK or < the program's rows, M > 64), ``_gemm_default`` runs.
    ``diag`` (M <= 4): the x tile's idle columns take 8 / M chunks of a row
    (:mod:`quantkit.kernels.aq_decode_sm90`); ``xpf``: the x codes loaded a trip ahead (else at use)."""
    cfg = {"kernel": "decode", "MT": mt, "WK": wk, "WM": wm, "DK": dk, "SUB": sub, "BM": bm, "PDL": pdl,
           "fuse_act_quant": False}
    if diag:
        cfg["DIAG"] = True
    if not xpf:
        cfg["XPF"] = False
    return cfg


def check_config_entry(config: dict) -> None:
    """A ValueError for a config this family cannot run (what ``tuning`` checks a user-cache entry with)."""
    _check_config(_fit_block(config, 128), 128)


def _check_config(config: dict, block_size: int) -> None:
    kind = check_keys("fp8_block", config, _KINDS)
    if "PDL" in config and kind != "decode" and (kind not in ("swap", "gluon") or config["fuse_act_quant"]
                                                 or not isinstance(config["PDL"], bool)):
        raise ValueError(f"PDL (a bool) is a key of the swap and gluon kernels on quantized x "
                         f"(fuse_act_quant=False) and of the decode kernel: {config!r}")
    if kind == "cublas":
        if config["fuse_act_quant"]:
            raise ValueError(f"the cublas GEMM reads quantized activations (fuse_act_quant=False): {config!r}")
        return
    if kind == "decode":
        from quantkit.kernels.aq_decode_sm90 import check_config

        check_config(config)
        if config["fuse_act_quant"]:
            raise ValueError(f"the decode kernel reads quantized activations (fuse_act_quant=False): {config!r}")
        return
    split = config.get("SPLIT_K", 1)
    if not (is_pow2(split) and split <= 16) or (split > 1 and (kind not in ("swap", "gluon")
                                                               or config["fuse_act_quant"])):
        raise ValueError(f"SPLIT_K must be a power of two <= 16, and > 1 only for the swap and gluon kernels on "
                         f"quantized x (fuse_act_quant=False): {config!r}")
    stages = config["num_stages"]
    if not is_pow2(config["num_warps"]) or not isinstance(stages, int) or isinstance(stages, bool) or stages < 1:
        raise ValueError(f"fp8_block config needs num_warps a power of two and num_stages ≥ 1: {config!r}")
    if kind == "stream":
        bw, bx = config["BLOCK_W"], config["BLOCK_X"]
        if not (is_pow2(bw) and 16 <= bw <= block_size and is_pow2(bx) and bx <= 64 and config["num_warps"] <= 16):
            raise ValueError(f"stream config needs BLOCK_W a power of two in [16, block_size={block_size}], "
                             f"BLOCK_X a power of two ≤ 64 and num_warps ≤ 16: {config!r}")
    elif kind in ("gemv", "swap"):
        bw, groups = config["BLOCK_W"], config["GROUPS"]
        bx = config.get("BLOCK_X", 1)
        if not (is_pow2(bw) and 16 <= bw <= block_size and is_pow2(bx) and bx <= 256 and is_pow2(groups)
                and groups <= 16):
            raise ValueError(f"{kind} config needs BLOCK_W a power of two in [16, block_size={block_size}], "
                             f"BLOCK_X a power of two ≤ 256 and GROUPS a power of two ≤ 16: {config!r}")
        if kind == "gemv" and not config["fuse_act_quant"]:
            raise ValueError(f"the gemv kernel quantizes x itself (fuse_act_quant=True): {config!r}")

    else:
        bm, bn = config["BLOCK_M"], config["BLOCK_N"]
        if not (is_pow2(bm) and bm >= 16 and is_pow2(bn) and 16 <= bn <= block_size):
            raise ValueError(f"{kind} config needs BLOCK_M a power of two ≥ 16 and BLOCK_N a power of two in "
                             f"[16, block_size={block_size}]: {config!r}")
        if config["fuse_act_quant"]:
            raise ValueError(f"the {kind} kernel reads quantized activations (fuse_act_quant=False): {config!r}")
        if config.get("EPI", "rows") not in ("rows", "tma") or (config.get("EPI") == "tma" and kind != "gluon"):
            raise ValueError(f"EPI is 'rows' or 'tma', and 'tma' only for the gluon kernel: {config!r}")
        if kind == "gluon" and not (config["num_warps"] == 8 and bm == 128 and stages >= 2):
            raise ValueError(f"gluon config needs BLOCK_M 128 and num_warps 8 (two 64-row consumer warpgroups) "
                             f"and num_stages ≥ 2: {config!r}")


def default_config(M: int, N: int, K: int) -> dict:
    """A sound choice without tuning (reasoning and round-1 data in notes/fp8_block.md)."""
    if M == 1:
        # 16-row programs with the K blocks of a step spread over 8 warps: N / 16 programs of eight
        # independent load chains each (the 64-row wgmma swap kernel gives N / 64 single-chain programs).
        return _stream(16, 1, 8, 3)
    if M <= 16:
        # The Gluon decode kernel where it can run (sm_90; it falls back to the fused default
        # elsewhere): x quantized once instead of in every program (H100 sweep, notes/fp8_block.md).
        if K % 128 == 0 and M > 8:
            # Two 128-deep chunks a warp and trip, x loaded at use: 3-13 % ahead of one chunk on six shapes of
            # other models at M = 16, and 8-row x tiles (two programs a weight tile) on narrow layers
            # (notes/fp8_block.md, round 33).
            return _decode(1, 4, dk=128, sub=2, xpf=False, bm=8 if N <= 1024 else 16)
        return _decode(1, 4, dk=128) if K % 128 == 0 else _decode(1, 4) if K % 64 == 0 else _fused_default(N)
    if M <= 64 and K % 128 == 0 and (N <= 1024 or (N <= 2048 and M <= 32)):
        # Narrow layers (k / v projections): the decode kernel with 2-4 x tiles a weight tile, N / 16
        # weight tiles, against N / 64 GEMM tiles: 0.85-1.18x of bf16 where the GEMMs ran 0.57-0.74x
        # at N = 512-2048, M = 17-64 on an H100 (notes/fp8_block.md, round 32). At N = 2048 past M = 32 the
        # Gluon GEMM leads (2048², M = 64: 12.7 against 15.1 µs; round 33).
        return _decode(1, 4, dk=128, sub=2, xpf=False)
    return _gemm_default(M, N, K)


# The SM count the heuristics size grids for (an H100's); the tuned tables replace them per GPU.
_NUM_SMS = 132
# At M > 256 the default is cuBLAS's block-scaled GEMM from this many multiply-adds (2048 x 4096²) where K is at
# least _CUBLAS_DEFAULT_MIN_K. Eagerly through the layer on an H100 at M = 2048 (three rounds), on shapes of other
# models: 1.19 / 1.33 / 1.32 / 1.46x of bf16 against the Gluon GEMM's 1.09 / 1.25 / 1.22 / 1.36x at 2048 x 8192,
# 5120², 4096 x 12288 and 5120 x 13824; behind it where K is short or the problem small, where its 60-100 µs of
# host time a call (the Gluon GEMM's: 25-38) shows: 8192 x 2048 1.10 against 1.26x, 3584² 1.09 against 1.18x
# (notes/fp8_block.md, round 33).
_CUBLAS_DEFAULT_MIN_MACS = 1 << 35
_CUBLAS_DEFAULT_MIN_K = 4096


def _gemm_default(M: int, N: int, K: int) -> dict:
    """:func:`default_config` without the decode kernel (what a ``decode`` config runs where that kernel cannot):
    the stream kernel at M = 1, the fused default to M = 16, and the GEMMs above, sized to the SM count."""
    if M <= 1:
        return _stream(16, 1, 8, 3)
    if M <= 16:
        return _fused_default(N)
    if M <= 64:
        # The H100 sweep on six shapes of other models at M = 64 (notes/fp8_block.md, round 33): the Gluon GEMM's
        # 64-wide tiles where two of them an SM cover N (split in two along K from K = 4096: 2048 x 8192 and
        # 3584 x 18944 at 23.7 and 45.5 µs against 28.7 and 92.0 for the round-32 defaults), the swap kernel cut
        # in two along K where N / 64 tiles fill one wave (5120 x 13824: 47.1 against 73.7 µs), and whole where
        # they fill more (the H100 table's 14336 x 4096 entry) — there one K block a step where K < 4096 (18944 x 3584:
        # 1.53x of bf16 eagerly against 1.38x for two; two led by 5-25 % at 12288 x 4096, 13824 x 5120 and
        # 28672 x 8192; round 33, call 9).
        tiles = ceil_div(N, 64)
        if 2 * tiles <= _NUM_SMS:
            return _gluon(128, 64, 8, 6, pdl=True, split_k=2 if K >= 4096 else 1)
        if tiles > _NUM_SMS and K < 4096:
            return _swap(64, 64, 1, 4, 4, False, pdl=True)
        return _swap(64, 64, 2, 4, 3, False, split_k=2 if tiles <= _NUM_SMS else 1, pdl=True)
    if M <= 256:
        # The Gluon GEMM with 64-wide tiles, launched while the quantization runs (its Triton tiled
        # fallback elsewhere): 4-21 % faster than the swap kernel's best at M = 128 on the Llama shapes
        # and the lm_head (H100 sweep, notes/fp8_block.md, round 13). Split in two along long K where the
        # last wave is at most half full: 2048 x 8192 and 5120 x 13824 at M = 256 took 26.1 and 75.0 µs
        # against 29.6 and 83.0 whole (round 33).
        tiles = ceil_div(M, 128) * ceil_div(N, 64)
        split = 2 if K >= 8192 and 0 < tiles % _NUM_SMS <= _NUM_SMS // 2 else 1
        return _gluon(128, 64, 8, 6, pdl=True, split_k=split)
    if _CUBLAS_ALLOWED and M * N * K >= _CUBLAS_DEFAULT_MIN_MACS and K >= _CUBLAS_DEFAULT_MIN_K:
        return _cublas()  # (where cuBLAS refuses the problem, _own_gemm_default's GEMM runs)
    # The Gluon GEMM on sm_90 (its Triton tiled fallback elsewhere): 1.4-1.6x the tiled kernel.
    return _gluon(128, 128, 8, 4)


def _own(config: dict) -> dict:
    """``config``, with our own large-M GEMM (the Gluon GEMM) in the place of cuBLAS's."""
    return _gluon(128, 128, 8, 4) if config["kernel"] == "cublas" else config


def _own_gemm_default(M: int, N: int, K: int) -> dict:
    """:func:`default_config` with our own GEMM where it would pick cuBLAS's."""
    return _own(default_config(M, N, K))


def _fit_block(config: dict, block_size: int) -> dict:
    """A tuned or default config made valid for ``block_size`` (tables and defaults are chosen for
    128-wide blocks; a weight tile takes one weight-scale row, so it is at most a block wide)."""
    kind = config["kernel"]
    if kind in ("gemv", "swap", "stream") and config["BLOCK_W"] > block_size:
        return dict(config, BLOCK_W=block_size)
    if kind in ("tiled", "gluon") and config["BLOCK_N"] > block_size:
        return dict(config, BLOCK_N=block_size)
    return config


def _fused_default(N: int) -> dict:
    """2 ≤ M ≤ 16 in one launch. Each program re-quantizes its x rows, so wider weight tiles pay less
    of that per weight byte; 32 rows × 8 x rows keeps N / 16 programs at N = 4096. Wide layers have
    programs enough for the 64-row wgmma kernel, which quantizes x half as often per weight byte (H100
    sweep, notes)."""
    return _stream(32, 8, 4, 3) if N <= 8192 else _swap(64, 16, 2, 4, 4, True)


# The sweep's search space by M bucket: ≤ 8 per cell, ≤ 24 distinct over the 15 benchmark cells, each
# compiled offline for sm_90 without spills (notes/fp8_block.md). Every M ≤ 16 entry is fused or the
# Gluon decode kernel: the output's allocation is the only one.
# 32-row programs of two warps (MT 2, WK 2) replaced WK 8 and WM 4, which no sweep picked: a wider probe
# (notes/fp8_block.md, round 13) found them 6 % faster than the fused swap kernel at 14336 x 4096, M = 16.
# Round 25: the 64-row four-warp program with its x codes loaded at use (207 registers instead of 249), 3.9 %
# ahead of the same with x a trip ahead at 14336 x 4096 on an H100 (1.8 % of the b16 decode step) and 9 % on an
# H200, in that program's place.
# Two chunks a warp and trip with x at use (the last two, with 16 and 8 x rows a program): 5-9 % faster than one
# chunk a trip at 4096² and 4096×14336, M = 16 on an H100, and 6.6 % at 1024×4096 with 8 x rows; with x a trip
# ahead the 16-row program spills (notes/fp8_block.md, round 27). They took the places of the 64-deep chunks
# (`_decode(1, 4)`, still the default where K is a multiple of 64 but not of 128) and of the 32-row program with
# two row warps (`_decode(1, 4, wm=2, dk=128)`), which no sweep had put in a table.
_GLUON_DECODE = [_decode(2, 2, dk=128), _decode(1, 4, dk=128), _decode(1, 4, dk=128, bm=8),
                 _decode(2, 2, wm=2, dk=128, xpf=False), _decode(1, 4, dk=128, sub=2, xpf=False),
                 _decode(1, 4, dk=128, sub=2, bm=8, xpf=False)]
# M = 1 stays with the fused kernels: the decode kernel measured ~2 µs faster per layer with L2 flushed
# (14336-wide shapes) but slower inside a CUDA-graph decode step, where x is hot in L2 and its quantization
# kernel is one more grid to wait for (end to end b1 4.26 -> 4.63 ms; notes/fp8_block.md, round 7).
_DECODE_1 = [_stream(16, 1, 8, 3), _stream(32, 1, 8, 3), _stream(16, 1, 4, 3)]
_DECODE_16 = [_swap(64, 16, 2, 4, 4, True), _stream(32, 8, 4, 3)] + _GLUON_DECODE
# M = 2-4: the decode kernel's DIAG programs (4 or 2 chunks of a row a slot in the x tile's idle columns)
_DECODE_4 = [_swap(64, 16, 2, 4, 4, True), _decode(1, 4, dk=128), _decode(2, 2, dk=128),
             _decode(1, 4, dk=128, diag=True), _decode(2, 2, dk=128, diag=True), _decode(1, 2, dk=128, diag=True),
             _decode(1, 4, diag=True), _decode(2, 4, dk=128, diag=True)]
# 16 < M <= 64 (round 32): the decode kernel with 2-4 x tiles of 16 (or 3-8 of 8) a weight tile, in the place of the
# swap kernel without PDL with split-K 2 (in no table). At N <= 2048 it ran 0.85-1.18x of bf16 where the GEMMs ran
# 0.57-0.74x; on the 4096- and 14336-wide Llama layers the GEMMs stay ahead (notes/fp8_block.md, round 32).
_MID_DECODE = [_decode(1, 4, dk=128, sub=2, xpf=False), _decode(1, 4, dk=128, sub=2, bm=8, xpf=False)]
# (round 7's one-group split-K 4 candidate never won a cell: its place went to the PDL variants)
# The Gluon GEMM with 64-wide tiles and PDL: 18.8 against the split-K swap kernel's 20.6 µs at 4096², M = 128
# in a wider probe (notes/fp8_block.md, round 13).
# Split-K 2 on it (round 31): at M <= 128 its 64-wide tiles are N / 64 programs, 64 on 4096-wide layers. It took
# the place of the swap kernel without PDL or split-K (in no table; the PDL variant runs as it where PDL cannot).
_MID = [_gluon(128, 64, 8, 6, pdl=True, split_k=2), _swap(64, 64, 2, 4, 3, False, split_k=2),
        _swap(64, 64, 2, 4, 3, False, split_k=4), _tiled(64, 128, 4, 4, False),
        _swap(64, 64, 2, 4, 3, False, pdl=True), _swap(64, 64, 2, 4, 3, False, split_k=2, pdl=True),
        _gluon(128, 64, 8, 6, pdl=True)]
# Large M: the Gluon GEMM (kernels/f8_gemm_sm90.py, warp-specialized and persistent), cuBLAS, and the
# Triton tiled GEMM the Gluon one falls back to. Round 12's probe (GPU time): Gluon 4 stages within
# -2..+8 % of cuBLAS at M = 1024-4096, 5 stages 5-11 % slower than 4; the tiled GEMM ~1.5x slower.
# The sweep ranks by GPU time, which favours cuBLAS; its `_scaled_mm` also costs 45-130 µs of host time
# a call against the Gluon path's 25-47 (notes/fp8_block.md, round 15). Where the two are within a few %
# on the GPU and the layer is short, the H100 table keeps the Gluon GEMM with PDL by hand (4096² at
# M = 1024: 40.2-40.9 µs cuBLAS, 41.2-41.3 Gluon on the GPU; eagerly 0.72x against bf16 with cuBLAS on a
# slow host): a re-sweep should not put cuBLAS back there without an eager A/B on such a host. Since
# round 18 that entry stores its tiles by TMA (nine alternating rounds: 41.8 against 42.1 µs, every round
# faster). Round 29 did the same for 4096² at M = 4096 (GPU 136-138 µs cuBLAS, 141-143 the Gluon GEMM with TMA
# stores; eagerly, three alternating rounds on a host where `_scaled_mm` cost 117-164 µs a call: cuBLAS 0.98-1.28x,
# the Gluon GEMM 1.16-1.22x) and for 4096x14336 at M = 1024 (cuBLAS 3-4 % ahead in the median, but one of four
# per-layer runs read it at 1.16x, a round of 201.8 µs against ~117 µs of GPU time; the Gluon GEMM 1.29-1.30x in
# every round), and for 4096² at M = 2048 (eagerly cuBLAS 0.61x, the Gluon GEMM 1.23x; the CUDA-graph 2048-token
# prefill level, 37.7-38.0 against 37.8-38.2 ms). The cuBLAS cells left (the 14336-wide ones at M >= 1024 but
# 4096x14336 at M = 1024) have GPU time enough to hide `_scaled_mm`'s host time: cuBLAS won every eager round
# there. `--ship` keeps such an entry for a GPU that borrows it unless its own sweep wins by 5 %.
# The Gluon GEMM with its output tiles stored by TMA while the next tile's K loop runs (round 17 probe: the
# GEMM 0.2-5 % faster than with row stores at M = 1024 / 4096 on the benchmark shapes) took the places of
# 3 stages and GROUP_M 16, which no sweep picked.
_LARGE = [_gluon(128, 128, 8, 4), _gluon(128, 128, 8, 4, epi="tma"), _gluon(128, 128, 8, 4, pdl=True, epi="tma"),
          _gluon(128, 128, 8, 4, pdl=True), _tiled(128, 128, 8, 4, True), _cublas()]


def candidate_configs(M: int, N: int, K: int) -> list[dict]:
    """The search space for the offline sweep."""
    if M == 1:
        return list(_DECODE_1)
    if M <= 4:
        return list(_DECODE_4)
    if M <= 16:
        return list(_DECODE_16)
    if M <= 64:
        return _MID_DECODE + [c for c in _MID if c != _swap(64, 64, 2, 4, 3, False, split_k=2)]
    if M <= 256:
        return list(_MID)
    return list(_LARGE)


def make_bench_inputs(N: int, K: int, dtype=torch.bfloat16) -> tuple:
    """Every positional argument of ``linear`` after x, for a layer of weights ~ N(0, 0.02²)."""
    w = (torch.randn(N, K, device="cuda") * 0.02).to(dtype)
    weight_q, weight_scale = quantize_weight(w)
    return weight_q, weight_scale, None, 128, None


# ---------------------------------------------------------------------------- GEMM launchers
def _split_count(config: dict, k: int, block_size: int, fuse: bool) -> int:
    """How many K splits the ``swap`` or ``gluon`` GEMM runs ``config`` with (1 for every other kernel,
    and when the activation is quantized in the kernel): float32 [split, M, N] partials where > 1."""
    if config["kernel"] == "gluon" and not fuse:  # (whole blocks a split, the last may be shorter)
        return split_plan(k, block_size, int(config.get("SPLIT_K", 1)))[1]
    if config["kernel"] != "swap" or fuse:
        return 1
    steps = ceil_div(k, block_size * config["GROUPS"])
    split = max(1, min(int(config.get("SPLIT_K", 1)), steps))
    while steps % split:  # even splits: every program runs the same whole steps
        split -= 1
    return split


def _splitk_sum(partials: torch.Tensor, bias, y: torch.Tensor, pdl: bool) -> None:
    """y = the float32 split-K partials [split, M, N] added in split order (+ bias), in y's dtype; ``pdl``: a
    programmatic dependent of the GEMM just launched (itself one of the quantization)."""
    split, m, n = partials.shape
    _splitk_sum_fast[(ceil_div(m, 32), ceil_div(n, 128))](
        partials, bias if bias is not None else y, y, m, n, y.stride(0), SPLIT=split, HAS_BIAS=bias is not None,
        BLOCK_M=32, BLOCK_N=128, num_warps=4, **(dict(WAIT_PRIOR=True, launch_pdl=True) if pdl else {}))


def _out_and_partials(m: int, n: int, dtype, device, config: dict, k: int, block_size: int, ws_bytes: int = 0):
    """(y, workspace of ``ws_bytes`` uint8, float32 [split, m, n] split-K partials or None) from one
    allocation, y's: the partials follow the workspace in y's block."""
    split = _split_count(config, k, block_size, False)
    part_bytes = 4 * split * m * n if split > 1 else 0
    head = ceil_div(ws_bytes, 16) * 16
    y, ws = out_with_workspace(m, n, dtype, device, head + part_bytes)
    partials = ws[head:].view(torch.float32).view(split, m, n) if part_bytes else None
    return y, ws[:ws_bytes], partials


def _run_gemm(x, xs, stride_xsm, stride_xsk, weight_q, weight_scale, bias, y, block_size, config, fuse, ue8m0,
              pdl=False, partials=None):
    """The GEMM launches of ``config``. ``pdl`` (swap on quantized x): launched as a programmatic
    dependent of the quantization kernel just launched (which called ``gdc_launch_dependents``), and
    the split-K sum as one of the GEMM. ``partials``: the swap GEMM's float32 [split, M, N] split-K
    partials where it splits (the callers carve them from y's allocation; left out, allocated here)."""
    m, k = x.shape
    n = weight_q.shape[0]
    has_bias = bias is not None
    bias_arg = bias if has_bias else y  # never read when HAS_BIAS is False
    xs_arg = xs if xs is not None else y  # never read when the activation is quantized in the kernel
    if config["kernel"] == "gemv":
        bw = config["BLOCK_W"]
        _gemv_fast[(ceil_div(n, bw), m)](
            x, weight_q, weight_scale, bias_arg, y, n, _loop_bound(k),
            x.stride(0), weight_q.stride(0), weight_scale.stride(0), weight_scale.stride(1), y.stride(0),
            BLOCK_W=bw, BLOCK_K=block_size, GROUPS=config["GROUPS"], HAS_BIAS=has_bias, UE8M0=ue8m0,
            ON_GPU=x.is_cuda, num_warps=config["num_warps"], num_stages=1)
        return y
    if config["kernel"] == "swap":
        bw = config["BLOCK_W"]
        # At least 4 rows: a thinner x tile gives each thread < 4 bytes, which Triton does not pipeline
        # (cp.async moves 4-16 bytes), so its L2 latency would stall every K block.
        bx = max(4, min(config["BLOCK_X"], triton.next_power_of_2(m)))
        groups = config["GROUPS"]
        tiles = ceil_div(n, bw) * ceil_div(m, bx)
        if partials is not None:  # carved by the caller for this config's split (_out_and_partials)
            split, out = partials.shape[0], partials
        else:
            split = _split_count(config, k, block_size, fuse)
            out = y if split == 1 else torch.empty(split, m, n, dtype=torch.float32, device=y.device)
        k_steps = ceil_div(k, block_size * groups) // split
        kwargs = dict(SPLIT_K=split, k_span=_loop_bound(k_steps * block_size * groups)) if split > 1 else {}
        if pdl:
            kwargs.update(WAIT_PRIOR=True, LAUNCH_DEPENDENTS=split > 1, launch_pdl=True)
        _gemm_swap_fast[(tiles, split) if split > 1 else (tiles,)](
            x, xs_arg, weight_q, weight_scale, bias_arg, out, m, n, _loop_bound(k),
            x.stride(0), stride_xsm, stride_xsk, weight_q.stride(0), weight_scale.stride(0), weight_scale.stride(1),
            n if split > 1 else y.stride(0),
            BLOCK_W=bw, BLOCK_X=bx, BLOCK_K=block_size, GROUPS=groups, FUSE=fuse,
            HAS_BIAS=has_bias and split == 1, EVEN_K=k % (block_size * groups) == 0, UE8M0=ue8m0, ON_GPU=x.is_cuda,
            W_EVICT="evict_first" if m <= bx and x.is_cuda else "",
            num_warps=config["num_warps"], num_stages=config["num_stages"], **kwargs)
        if split > 1:
            _splitk_sum(out, bias, y, pdl)
        return y
    if config["kernel"] == "stream":
        bw = config["BLOCK_W"]
        bx = min(config["BLOCK_X"], triton.next_power_of_2(m))
        slices = config["num_warps"]
        grid = (ceil_div(n, bw) * ceil_div(m, bx),)
        _gemm_stream_fast[grid](
            x, xs_arg, weight_q, weight_scale, bias_arg, y, m, n, _loop_bound(k),
            x.stride(0), stride_xsm, stride_xsk, weight_q.stride(0), weight_scale.stride(0), weight_scale.stride(1),
            y.stride(0),
            BLOCK_W=bw, BLOCK_X=bx, BLOCK_K=block_size, SLICES=slices, FUSE=fuse, HAS_BIAS=has_bias,
            EVEN_K=k % (block_size * slices) == 0, UE8M0=ue8m0, ON_GPU=x.is_cuda,
            num_warps=slices, num_stages=config["num_stages"])
        return y
    if config["kernel"] == "gluon":
        from quantkit.kernels import f8_gemm_sm90

        if f8_gemm_sm90.usable(x, weight_q, block_size, config["BLOCK_N"]):
            split = _split_count(config, k, block_size, False)
            if split > 1 and partials is None:
                partials = torch.empty(split, m, n, dtype=torch.float32, device=y.device)
            f8_gemm_sm90.launch(x, xs, stride_xsm, stride_xsk, weight_q, weight_scale, bias, y, block_size, config,
                                pdl=pdl, partials=partials if split > 1 else None)
            if split > 1:
                _splitk_sum(partials, bias, y, pdl)
            return y
        # (at most ~160 KB of operand ring: a 256-deep block doubles a stage)
        bm, bn = config["BLOCK_M"], config["BLOCK_N"]
        stages = max(1, min(config["num_stages"], 160 * 1024 // ((bm + bn) * block_size)))
        config = _tiled(bm, bn, config["num_warps"], stages, True, config["GROUP_M"])
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    x_desc = w_desc = None
    use_tma = config["tma"] and _tma_usable(weight_q) and _tma_usable(x)
    if use_tma:
        # Host descriptors cost a few µs of Python per call: only large-M configs ask for them.
        from triton.tools.tensor_descriptor import TensorDescriptor

        x_desc = TensorDescriptor.from_tensor(x, [bm, block_size])
        w_desc = TensorDescriptor.from_tensor(weight_q, [bn, block_size])
    grid = (ceil_div(m, bm) * ceil_div(n, bn),)
    _gemm_tiled_fast[grid](
        x, x_desc, xs_arg, weight_q, w_desc, weight_scale, bias_arg, y, m, n, _loop_bound(k),
        x.stride(0), stride_xsm, stride_xsk, weight_q.stride(0), weight_scale.stride(0), weight_scale.stride(1),
        y.stride(0),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=block_size, GROUP_M=config["GROUP_M"], USE_TMA=use_tma,
        HAS_BIAS=has_bias, EVEN_K=k % block_size == 0, num_warps=config["num_warps"], num_stages=config["num_stages"])
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
    if m == 0 or n == 0:
        return torch.empty(m, n, dtype=out_dtype, device=x_q.device)
    config = config if config is not None else _fit_block(_tuned_config(x_q, m, n, k, None), block_size)
    _check_config(config, block_size)
    if config["kernel"] == "gemv":  # it quantizes x itself; the same weight tiling through the MMA kernel
        config = _swap(config["BLOCK_W"], 1, config["GROUPS"], config["num_warps"], 4, False)
    if config["kernel"] == "decode":
        from quantkit.kernels import aq_decode_sm90

        if x_q.stride(0) % 16 == 0 and x_q.data_ptr() % 16 == 0 \
                and aq_decode_sm90.usable(x_q, weight_q, config, block_size):
            y = torch.empty(m, n, dtype=out_dtype, device=x_q.device)
            aq_decode_sm90.launch(x_q, x_scale, x_scale.stride(0), x_scale.stride(1), weight_q, weight_scale, bias,
                                  y, config, fp8=True, group=block_size)
            return y
        config = _triton_gemm_config(m, n, k, block_size)
    if config["kernel"] == "cublas":  # a choice for linear(), whose scales are laid out as cuBLAS wants
        config = _triton_gemm_config(m, n, k, block_size)
    y, _, partials = _out_and_partials(m, n, out_dtype, x_q.device, config, k, block_size)
    return _run_gemm(x_q, x_scale, x_scale.stride(0), x_scale.stride(1), weight_q, weight_scale, bias, y,
                     block_size, config, False, False, partials=partials)


def linear(x: torch.Tensor, weight_q: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None = None,
           block_size: int = 128, scale_fmt: str | None = None, *, config: dict | None = None) -> torch.Tensor:
    """The Fp8BlockLinear forward on x [M, K]: quantize x per 1×b group, block-scaled GEMM, bias; y in x.dtype.

    Fused configs are one launch that allocates only y; ``decode`` configs (M ≤ 64, sm_90) quantize x
    into a workspace inside y's allocation and run the Gluon decode kernel; the others quantize x
    first into codes and K-major scales (also behind y) and run the GEMM on them."""
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
        config = _fit_block(_tuned_config(x, m, n, k, functools.partial(_bench_config, x, weight_q, weight_scale,
                                                                     bias, block_size, scale_fmt)), block_size)
    _check_config(config, block_size)
    if m == 0 or n == 0:
        return torch.empty(m, n, dtype=x.dtype, device=x.device)
    if config["kernel"] == "cublas" and not _cublas_usable(x, m, n, k, bias, block_size):
        config = _fit_block(_own_gemm_default(m, n, k), block_size)
    if config["kernel"] == "decode":
        from quantkit.kernels import aq_decode_sm90

        if aq_decode_sm90.usable(x, weight_q, config, block_size):
            return _decode_launch(x, weight_q, weight_scale, bias, block_size, ue8m0, config, aq_decode_sm90)
        config = _fit_block(_gemm_default(m, n, k), block_size)
    if config["fuse_act_quant"]:
        y = torch.empty(m, n, dtype=x.dtype, device=x.device)
        return _run_gemm(x, None, 0, 0, weight_q, weight_scale, bias, y, block_size, config, True, ue8m0)
    # Scales K-major ([ceil(K/b), M]): the GEMMs read one K block's scales for a row tile coalesced
    # (and this is the layout cuBLAS asks for: x_s.t() is [M, K/b] with M-major strides).
    # One allocation, the output's: codes, scales and split-K partials are a workspace behind it (an
    # eager call's host time is largely its allocations and launches; the plan replays one). cuBLAS
    # writes into y too (``_scaled_mm``'s out= form); both start 16-byte aligned, as it asks.
    groups = ceil_div(k, block_size)
    kq = ceil_div(m * k, 16) * 16
    y, ws, partials = _out_and_partials(m, n, x.dtype, x.device, config, k, block_size, kq + 4 * groups * m)
    x_q = ws[:m * k].view(FP8_DTYPE).view(m, k)
    x_s = ws[kq:].view(torch.float32).view(groups, m)
    pdl = bool(config.get("PDL")) and config["kernel"] in ("swap", "gluon") and not _INTERPRET and x.is_cuda \
        and _has_tma(x.device.index or 0)
    _launch_act_quant(x, x_q, x_s, 1, m, block_size, ue8m0, launch_dependents=pdl)
    if config["kernel"] == "cublas":
        if _try_cublas(x_q, x_s, weight_q, weight_scale, bias, y):
            return y
        config = _triton_gemm_config(m, n, k, block_size)  # (split-K partials, if any, allocated by _run_gemm)
    return _run_gemm(x_q, x_s, 1, m, weight_q, weight_scale, bias, y, block_size, config, False, ue8m0, pdl,
                     partials)


def _decode_launch(x, weight_q, weight_scale, bias, block_size, ue8m0, config, aq) -> torch.Tensor:
    """M ≤ 64 on sm_90: the codes [M, Kp] and K-major scales [ceil(K/b), M] into a workspace behind the
    output (one allocation), then the decode kernel, launched while the quantization runs when ``PDL``."""
    m, k = x.shape
    kp = ceil_div(k, 16) * 16
    groups = ceil_div(k, block_size)
    out, ws = out_with_workspace(m, weight_q.shape[0], x.dtype, x.device, m * kp + 4 * groups * m)
    x_q = ws[:m * kp].view(FP8_DTYPE).view(m, kp)[:, :k]
    x_s = ws[m * kp:].view(torch.float32).view(groups, m)
    pdl = config["PDL"] and not _INTERPRET  # (the interpreted quantization kernel has no grid control)
    _launch_act_quant(x, x_q, x_s, 1, m, block_size, ue8m0, launch_dependents=pdl)
    aq.launch(x_q, x_s, 1, m, weight_q, weight_scale, bias, out, config, fp8=True, group=block_size, pdl=pdl)
    return out


def _try_cublas(x_q, x_s, weight_q, weight_scale, bias, y) -> bool:
    """cuBLAS's block-scaled GEMM on operands quantized here, into ``y``; False where cuBLAS refuses the
    problem (CUBLAS_STATUS_NOT_SUPPORTED, e.g. M not a multiple of 4 on cuBLAS 13.0: then remembered)."""
    try:
        torch._scaled_mm(x_q, weight_q.t(), x_s.t(), weight_scale.t(), bias=bias, out_dtype=y.dtype, out=y)
        return True
    except torch.OutOfMemoryError:  # not a refusal of the problem: the caller's to handle, nothing remembered
        raise
    except RuntimeError:
        _CUBLAS_REFUSED.add((x_q.shape[0], weight_q.shape[0], x_q.shape[1], y.dtype))
        return False


def _triton_gemm_config(m: int, n: int, k: int, block_size: int) -> dict:
    """Our own GEMM on activations already quantized, where a ``cublas`` or ``decode`` config cannot run: what
    ``linear`` runs there (:func:`_gemm_default`), with the Gluon GEMM for cuBLAS and the swap kernel where the
    default quantizes x itself (M <= 16)."""
    config = _own(_gemm_default(m, n, k))
    if config["fuse_act_quant"]:
        config = _swap(64, 64, 1, 4, 4, False)
    return _fit_block(config, block_size)


# Problems cuBLAS refused once (by (M, N, K, dtype)): not asked again.
_CUBLAS_REFUSED: set = set()
# QUANTKIT_FP8_CUBLAS=0 keeps every GEMM our own (_own_gemm_default replaces "cublas" entries and defaults).
_CUBLAS_ALLOWED = os.environ.get("QUANTKIT_FP8_CUBLAS", "1") != "0" and hasattr(torch, "_scaled_mm")


def _cublas_usable(x, m, n, k, bias, block_size) -> bool:
    """Whether the ``cublas`` config can run here; it needs a CUDA x, 128-blocks, 16-aligned N and K
    (cuBLAS's operand alignment), and a bias cuBLAS fuses (same dtype as the output, not float32)."""
    return (_CUBLAS_ALLOWED and x.is_cuda and block_size == 128 and n % 16 == 0 and k % 16 == 0
            and (bias is None or (bias.dtype == x.dtype and x.dtype != torch.float32))
            and (m, n, k, x.dtype) not in _CUBLAS_REFUSED)


def _bench_config(x, weight_q, weight_scale, bias, block_size, scale_fmt, config) -> float:
    import triton.testing

    fn = lambda: linear(x, weight_q, weight_scale, bias, block_size, scale_fmt, config=config)  # noqa: E731
    fn()
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")
