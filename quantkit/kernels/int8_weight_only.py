"""int8 weight-only (A16W8) linear on the GPU: ``y = (x @ Wq^T) * w_scale[n] (+ bias)``.

Numerics are those of :func:`quantkit.reference.int8.int8_weight_only_linear`::

    y[m, n] = (sum_k x[m, k] * Wq[n, k]) * w_scale[n] + bias[n]

accumulated in float32 (x is never quantized), the per-channel scale and the bias applied once after
the K sum (the scale factors out of it), the result cast to ``x.dtype``.

Layouts
    x             [M, K]  bfloat16 / float16 / float32, last dim contiguous, any row stride
    weight_q      [N, K]  int8, contiguous (row n = output channel n; codes -127..127, any byte works)
    weight_scale  [N]     float32 (what quantize_ makes) or bfloat16 / float16 (other tools'
                          checkpoints); [N, 1] is accepted too. Read and widened to float32 in-kernel.
    bias          [N]     any float dtype, optional
    y             [M, N]  x.dtype, new and contiguous

Kernels (the config, chosen by problem size, names one; see :func:`default_config`)
    gemv    CUDA cores, for M = 1 (valid for any M: one program per row and weight tile, programs of
            the same tile adjacent so that rows after the first hit L2). Each thread streams 16 B of
            int8 per row chunk, dequantizes in registers, FMAs into a [BLOCK_N, BLOCK_K] float32
            accumulator, reduced once at the end. One launch, nothing allocated but the output.
    stream  tensor cores (mma.sync, 16x8x16), for 1 <= M <= 16 (valid for any M): a program owns
            BLOCK_N weight rows and streams them once over all of K, with the K chunk of every step
            split between its warps through a batched ``tl.dot`` over [warps, BLOCK_N, K/warps]
            tiles (one K slice per warp; the warp partials are summed once at the end). Small
            BLOCK_N fills the GPU without split-K: 16 rows give 256 programs at N = 4096 (~2 per
            SM), 32 rows 448 at N = 14336. For M = 1 the x row is loaded once and broadcast
            instead of being re-read as 16 clamped rows.
            Triton loads the int8 operand with 8-byte ``LDS.64`` (the k order is permuted the same
            way in both operands), ~2 instructions per weight element for conversion.
            One launch, nothing allocated but the output.
    mma     wgmma ("swap AB"), for 16 < M <= 256 where ``tma_wgmma`` cannot run: computes Y^T tiles =
            W_tile · X_tile^T so that
            the dequantized weight tile is the left operand of ``tl.dot`` (registers on sm_90's
            wgmma; the activation tile is read from shared memory), software-pipelined over K,
            grouped tile order for L2 reuse; split-K where the tiles are fewer than the SMs.
    mma_ss  wgmma with both operands in shared memory, for M > 256: Y tiles = X_tile · W_tile^T;
            the int8 tile is read with 16-byte loads, converted once per step by all warps of the
            CTA (~2 instructions per weight element against ~4.3 for the register operand, whose
            bf16 layout forces 2-byte loads) and stored as the B operand. Triton waits for the
            step's wgmmas before that single buffer is rewritten, so only other CTAs overlap the
            conversion with MMAs; x tiles are cp.async-pipelined. The M > 256 kernel wherever the
            Gluon one below cannot run (fp32 x, not sm_90, K % 16 != 0, unaligned rows).
    tma_wgmma  for M > 16 on sm_90 (and M <= 16 on wide layers): the Gluon kernel of
            :mod:`quantkit.kernels.wo_gemm_sm90` (TMA ring, Y^T tiles with the converted weight as
            the register operand of an asynchronous wgmma, the next tile converted while the
            previous MMA runs), 1.6-1.8x the speed of ``mma_ss`` on the H100.

The wgmma fence (correctness of ``mma``): with a register A operand, Triton 3.6 splits each
step's dot into k16 wgmmas and leaves up to three of them in flight across the loop's back edge
while the next step's conversion already rewrites their A registers (the PTX rewrites the same registers before
``wgmma.wait_group``: undefined behaviour, and the SASS of the 128x128x64/4-stage and
128x256x64/3-stage tiles does exactly that — the wrong output tiles seen on the H100). ``acc + 0.0``
after the dot is a use of the accumulator that Triton cannot fold away (it is not an identity for
-0.0), so it waits for every wgmma of the step before the next step starts: no A register is
rewritten while an MMA may still read it. The result is unchanged (only -0.0 becomes +0.0). The
tests compile every mma config for sm_90 and check the SASS for this hazard.

Split-K (``mma`` only, ``SPLIT_K > 1``, offered for M > 16 where the output tiles are fewer than
the SMs): every split writes float32 partial sums to a workspace [splits, M, N] carved from the
output's own allocation (:func:`quantkit.kernels.workspace.out_with_workspace`: one allocation a
call, CUDA-graph safe; the block lives as long as the output) and ``_splitk_epilogue_kernel`` adds them
in a fixed order, applies scale and bias and casts: deterministic, and the sum stays in float32 as the
reference has it. The second launch is the one exception to "one launch"; decode sizes (M <= 16) never
take it by default.

Dequantization: q + 128 is placed in the low mantissa byte of 2^23 with integer ops and one float32
subtraction of (2^23 + 128) leaves q exactly. The hardware int→float conversion (I2F) issues at a
quarter of the FMA rate on sm_90 and would co-limit the GEMV at full HBM bandwidth; the integer
ops + FADD run at full rate. Then float32 → bf16/fp16 is exact (|q| ≤ 128 needs 8 bits).

float32 activations: the GEMV multiplies in exact float32; the tensor-core kernels use
``input_precision="tf32x3"`` (split-operand tf32, ~float32 accuracy; the int8 weight is exact in
tf32, so only x is split). Plain tf32 would lose ~3 decimal digits of x.

Launches go through :func:`quantkit.kernels.launch.cached` (Triton's own launch path costs
30-65 µs of host time, more than a decode-size kernel).

Interpreter notes (TRITON_INTERPRET=1, tests on CPU): numpy has no bfloat16, so ``tl.dot`` on bf16
operands is wrong there — the launcher makes the dot run on float32 copies of the (exactly
representable) bf16 values instead; and the interpreter cannot take a runtime loop bound (scalar
arguments are 1-element arrays that numpy ≥ 2 refuses to turn into an int), so the trip count is
also passed as a constexpr there. On the GPU both constexprs are fixed and cost no recompiles.

Limits: M ≥ 1, N ≥ 1, K ≥ 1; each tensor below 2^31 elements per index computed in int32
(row offsets are widened to int64). N and K need not be multiples of any tile. Inference only.
"""
from __future__ import annotations

import functools
import sys

import torch
import triton
import triton.language as tl

from quantkit.kernels import tuning
from quantkit.kernels.configs import check_keys, key_sets
from quantkit.kernels.launch import cached
from quantkit.kernels.tiling import grouped_pid
from quantkit.kernels.workspace import out_with_workspace
from quantkit.reference.common import ceil_div  # not triton.cdiv: ~4 µs of host time a call

MIN_CAPABILITY = (8, 0)
FAMILY = "int8_weight_only"

_X_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_SCALE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_EPILOGUE_BLOCK = 512
_NUM_SMS_H100 = 132  # sizing heuristic for tile counts; the tuned tables replace it per GPU


# --------------------------------------------------------------------------- Triton kernels
@triton.jit
def _int8_to_f32(w):
    # Exact, full-rate: the byte q ^ 0x80 = q + 128 becomes the low mantissa byte of 2^23, i.e. the
    # float 2^23 + 128 + q; subtracting 2^23 + 128 leaves q.
    bits = w.to(tl.uint8, bitcast=True).to(tl.int32) ^ 0x4B000080
    return bits.to(tl.float32, bitcast=True) - 8388736.0


@triton.jit
def _int8_to(w, DTYPE: tl.constexpr):
    """int8 -> DTYPE, exactly, without the quarter-rate I2F conversions."""
    if DTYPE == tl.bfloat16:
        # Triton lowers int8 -> bf16 to packed byte permutes, masks and bf16x2 subtractions.
        return w.to(tl.bfloat16)
    elif DTYPE == tl.float16:
        # fp16 has 10 mantissa bits: 0x6400 | (q + 128) is 1024 + 128 + q.
        bits = w.to(tl.uint8, bitcast=True).to(tl.int16) ^ 0x6480
        return bits.to(tl.float16, bitcast=True) - 1152.0
    else:
        return _int8_to_f32(w)


@triton.jit
def _dequant_kernel(w_ptr, s_ptr, out_ptr, N, K, stride_wn, stride_on, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr):
    """out[n, k] = float32(q[n, k]) * scale[n], rounded once to out's dtype (as the reference)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows[:, None] < N) & (cols[None, :] < K)
    q = tl.load(w_ptr + rows[:, None].to(tl.int64) * stride_wn + cols[None, :], mask=mask, other=0)
    s = tl.load(s_ptr + rows, mask=rows < N, other=0.0).to(tl.float32)
    w = _int8_to_f32(q) * s[:, None]
    tl.store(out_ptr + rows[:, None].to(tl.int64) * stride_on + cols[None, :], w.to(out_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def _epilogue(acc, scale_ptr, bias_ptr, out_ptr, rows_w, offs_n, offs_m, M, N, HAS_BIAS: tl.constexpr):
    """acc[BLOCK_N, BLOCK_M] (transposed output tile) -> out[m, n] = acc * scale[n] + bias[n]."""
    y = acc * tl.load(scale_ptr + rows_w).to(tl.float32)[:, None]
    if HAS_BIAS:
        y += tl.load(bias_ptr + rows_w).to(tl.float32)[:, None]
    mask = (offs_n < N)[:, None] & (offs_m < M)[None, :]
    tl.store(out_ptr + offs_m.to(tl.int64)[None, :] * N + offs_n[:, None], y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["M"])
def _gemv_kernel(x_ptr, w_ptr, scale_ptr, bias_ptr, out_ptr, M, N, K, stride_xm, stride_wn, ITERS,
                 LOOP_TRIPS: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr):
    """Grid (M * cdiv(N, BLOCK_N),). Program pid computes rows of weight tile pid // M for
    activation row pid % M over all of K."""
    pid = tl.program_id(0)
    pid_m = pid % M  # rows of one weight tile are neighbours: the 2nd..Mth read it from L2
    pid_n = pid // M
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Out-of-range rows re-read the last row instead of being masked, so loads need no row mask
    # (their results are never stored).
    rows = tl.minimum(offs_n, N - 1)
    offs_k = tl.arange(0, BLOCK_K)
    w_ptrs = w_ptr + rows.to(tl.int64)[:, None] * stride_wn + offs_k[None, :]
    x_ptrs = x_ptr + pid_m.to(tl.int64) * stride_xm + offs_k
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for i in tl.range(0, LOOP_TRIPS if LOOP_TRIPS > 0 else ITERS, num_stages=STAGES):
        if EVEN_K:
            w = tl.load(w_ptrs, eviction_policy="evict_first")
            xv = tl.load(x_ptrs)
        else:
            k_ok = offs_k < K - i * BLOCK_K
            w = tl.load(w_ptrs, mask=k_ok[None, :], other=0, eviction_policy="evict_first")
            xv = tl.load(x_ptrs, mask=k_ok, other=0.0)
        # Elementwise FMAs into a 2-D accumulator: the cross-lane reduction happens once, below.
        acc += _int8_to_f32(w) * xv.to(tl.float32)[None, :]
        w_ptrs += BLOCK_K
        x_ptrs += BLOCK_K
    y = tl.sum(acc, axis=1) * tl.load(scale_ptr + rows).to(tl.float32)
    if HAS_BIAS:
        y += tl.load(bias_ptr + rows).to(tl.float32)
    tl.store(out_ptr + pid_m.to(tl.int64) * N + offs_n, y.to(out_ptr.dtype.element_ty), mask=offs_n < N)


@triton.jit(do_not_specialize=["M"])
def _stream_kernel(x_ptr, w_ptr, scale_ptr, bias_ptr, out_ptr, M, N, K, stride_xm, stride_wn, ITERS,
                   LOOP_TRIPS: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, X_BCAST: tl.constexpr,
                   DOT_DTYPE: tl.constexpr, TF32X3: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_K: tl.constexpr, KSPLIT: tl.constexpr, STAGES: tl.constexpr):
    """Grid (cdiv(N, BLOCK_N) * cdiv(M, BLOCK_M),). Each program accumulates, for each of KSPLIT
    K slices of every BLOCK_K step (one per warp: the batch dimension of the 3-D dot is laid over
    the warps), acc[s, BLOCK_N, BLOCK_M] = W[n-tile, slice s] · X[m-tile, slice s]^T; the slices
    are summed once after the loop."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % tiles_m  # programs sharing a weight tile are neighbours (L2 reuse when M > BLOCK_M)
    pid_n = pid // tiles_m
    KS: tl.constexpr = BLOCK_K // KSPLIT
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows_w = tl.minimum(offs_n, N - 1)  # clamped instead of masked: see _gemv_kernel
    rows_x = tl.minimum(offs_m, M - 1)
    k_base = tl.arange(0, KSPLIT)[:, None, None] * KS
    k_w = k_base + tl.arange(0, KS)[None, None, :]  # [KSPLIT, 1, KS]: column in the step of W[n, .]
    k_x = k_base + tl.arange(0, KS)[None, :, None]  # [KSPLIT, KS, 1]: column in the step of x[m, .]
    w_ptrs = w_ptr + rows_w.to(tl.int64)[None, :, None] * stride_wn + k_w
    if X_BCAST:  # M == 1: one row of x, broadcast over the tile's columns after the load
        x_ptrs = x_ptr + k_x
    else:
        x_ptrs = x_ptr + rows_x.to(tl.int64)[None, None, :] * stride_xm + k_x
    acc = tl.zeros((KSPLIT, BLOCK_N, BLOCK_M), dtype=tl.float32)
    for i in tl.range(0, LOOP_TRIPS if LOOP_TRIPS > 0 else ITERS, num_stages=STAGES):
        if EVEN_K:
            w = tl.load(w_ptrs, eviction_policy="evict_first")
            xt = tl.load(x_ptrs)
        else:
            k_left = K - i * BLOCK_K
            w = tl.load(w_ptrs, mask=k_w < k_left, other=0, eviction_policy="evict_first")
            xt = tl.load(x_ptrs, mask=k_x < k_left, other=0.0)
        if X_BCAST:
            xt = tl.broadcast_to(xt, (KSPLIT, KS, BLOCK_M))
        a = _int8_to(w, DOT_DTYPE)
        b = xt.to(DOT_DTYPE)
        if TF32X3:
            acc = tl.dot(a, b, acc, input_precision="tf32x3")
        else:
            acc = tl.dot(a, b, acc)
        w_ptrs += BLOCK_K
        x_ptrs += BLOCK_K
    _epilogue(tl.sum(acc, axis=0), scale_ptr, bias_ptr, out_ptr, rows_w, offs_n, offs_m, M, N, HAS_BIAS)


@triton.jit(do_not_specialize=["M"])
def _mma_kernel(x_ptr, w_ptr, scale_ptr, bias_ptr, out_ptr, M, N, K, stride_xm, stride_wn, ITERS,
                LOOP_TRIPS: tl.constexpr, HAS_BIAS: tl.constexpr, PARTIAL: tl.constexpr, EVEN_K: tl.constexpr,
                DOT_DTYPE: tl.constexpr, TF32X3: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_K: tl.constexpr, GROUP_N: tl.constexpr, WGMMA_FENCE: tl.constexpr = True):
    """Grid (cdiv(N, BLOCK_N) * cdiv(M, BLOCK_M), splits). Each program accumulates the transposed
    output tile acc[BLOCK_N, BLOCK_M] = W[n-tile, k-range] · X[m-tile, k-range]^T. ``WGMMA_FENCE``
    is never False in a launch: only the test that proves the SASS hazard check finds the
    unfenced loop's hazard compiles it without."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    # GROUP_N weight tiles are swept across every activation tile before the next group starts, so
    # the programs in flight share their weight and activation tiles in L2 (grouped along N).
    pid_n, pid_m = grouped_pid(pid, N, M, BLOCK_N, BLOCK_M, GROUP_N)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows_w = tl.minimum(offs_n, N - 1)  # clamped instead of masked: see _gemv_kernel
    rows_x = tl.minimum(offs_m, M - 1)
    offs_k = pid_k * ITERS * BLOCK_K + tl.arange(0, BLOCK_K)
    w_ptrs = w_ptr + rows_w.to(tl.int64)[:, None] * stride_wn + offs_k[None, :]
    x_ptrs = x_ptr + rows_x.to(tl.int64)[:, None] * stride_xm + offs_k[None, :]
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for i in range(0, LOOP_TRIPS if LOOP_TRIPS > 0 else ITERS):
        if EVEN_K:
            w = tl.load(w_ptrs)
            xt = tl.load(x_ptrs)
        else:
            k_ok = offs_k[None, :] < K - i * BLOCK_K
            w = tl.load(w_ptrs, mask=k_ok, other=0)
            xt = tl.load(x_ptrs, mask=k_ok, other=0.0)
        # The dequantized weight is the left operand: on sm_90 wgmma takes it from registers, where
        # it was converted, instead of a round trip through shared memory.
        a = _int8_to(w, DOT_DTYPE)
        b = tl.trans(xt.to(DOT_DTYPE))
        if TF32X3:
            acc = tl.dot(a, b, acc, input_precision="tf32x3")
        else:
            acc = tl.dot(a, b, acc)
        if WGMMA_FENCE:
            # The wgmma fence (module docstring): every MMA of this step completes before the next
            # step rewrites the A-operand registers. Not an identity for -0.0, so it is not folded.
            acc = acc + 0.0
        w_ptrs += BLOCK_K
        x_ptrs += BLOCK_K
    if PARTIAL:
        mask = (offs_n < N)[:, None] & (offs_m < M)[None, :]
        tl.store(out_ptr + (pid_k * M + offs_m).to(tl.int64)[None, :] * N + offs_n[:, None], acc, mask=mask)
    else:
        _epilogue(acc, scale_ptr, bias_ptr, out_ptr, rows_w, offs_n, offs_m, M, N, HAS_BIAS)


@triton.jit(do_not_specialize=["M"])
def _mma_ss_kernel(x_ptr, w_ptr, scale_ptr, bias_ptr, out_ptr, M, N, K, stride_xm, stride_wn, ITERS,
                   LOOP_TRIPS: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, DOT_DTYPE: tl.constexpr,
                   TF32X3: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr):
    """Grid (cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N),). Each program accumulates the output tile
    acc[BLOCK_M, BLOCK_N] = X[m-tile, :] · W[n-tile, :]^T with both wgmma operands in shared memory:
    the int8 tile is read with 16-byte loads, converted once per step by all warps and stored as
    the B operand; Triton waits for the step's wgmmas before that buffer is written again."""
    pid_m, pid_n = grouped_pid(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows_x = tl.minimum(offs_m, M - 1)  # clamped instead of masked: see _gemv_kernel
    rows_w = tl.minimum(offs_n, N - 1)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rows_x.to(tl.int64)[:, None] * stride_xm + offs_k[None, :]  # [BLOCK_M, BLOCK_K]
    w_ptrs = w_ptr + rows_w.to(tl.int64)[None, :] * stride_wn + offs_k[:, None]  # [BLOCK_K, BLOCK_N]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in range(0, LOOP_TRIPS if LOOP_TRIPS > 0 else ITERS):
        if EVEN_K:
            xt = tl.load(x_ptrs)
            w = tl.load(w_ptrs)
        else:
            k_left = K - i * BLOCK_K
            xt = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            w = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0)
        a = xt.to(DOT_DTYPE)
        b = _int8_to(w, DOT_DTYPE)
        if TF32X3:
            acc = tl.dot(a, b, acc, input_precision="tf32x3")
        else:
            acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    y = acc * tl.load(scale_ptr + rows_w).to(tl.float32)[None, :]
    if HAS_BIAS:
        y += tl.load(bias_ptr + rows_w).to(tl.float32)[None, :]
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    tl.store(out_ptr + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["M"])
def _splitk_epilogue_kernel(part_ptr, scale_ptr, bias_ptr, out_ptr, M, N, SPLITS, LOOP_TRIPS: tl.constexpr,
                            HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    """Grid (M, cdiv(N, BLOCK)): out[m, n] = (sum_s part[s, m, n]) * scale[n] + bias[n], s in order."""
    pid_m = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    n_ok = offs_n < N
    ptrs = part_ptr + pid_m.to(tl.int64) * N + offs_n
    split_stride = M.to(tl.int64) * N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for _ in range(0, LOOP_TRIPS if LOOP_TRIPS > 0 else SPLITS):
        acc += tl.load(ptrs, mask=n_ok, other=0.0)
        ptrs += split_stride
    y = acc * tl.load(scale_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)
    if HAS_BIAS:
        y += tl.load(bias_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + pid_m.to(tl.int64) * N + offs_n, y.to(out_ptr.dtype.element_ty), mask=n_ok)


def _is_interpreted(fn) -> bool:
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - layout of other triton versions
        return False
    return isinstance(fn, InterpretedFunction)


# Fixed when the kernels are decorated (TRITON_INTERPRET is read then), never changed afterwards.
_INTERPRETED = _is_interpreted(_mma_kernel)
_TL_DTYPE = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}

_gemv_fast = cached(_gemv_kernel)
_stream_fast = cached(_stream_kernel)
_mma_fast = cached(_mma_kernel)
_mma_ss_fast = cached(_mma_ss_kernel)
_splitk_epilogue_fast = cached(_splitk_epilogue_kernel)
_dequant_fast = cached(_dequant_kernel)


# --------------------------------------------------------------------------- configs
def _gemv_config(block_n: int, block_k: int, warps: int = 4, stages: int = 3) -> dict:
    return {"kernel": "gemv", "BLOCK_N": block_n, "BLOCK_K": block_k, "num_warps": warps, "num_stages": stages}


def _stream_config(block_n: int, block_k: int, warps: int = 4, stages: int = 4, block_m: int = 16) -> dict:
    """``num_warps`` is also the number of K slices per step (one per warp)."""
    return {"kernel": "stream", "BLOCK_N": block_n, "BLOCK_M": block_m, "BLOCK_K": block_k, "num_warps": warps,
            "num_stages": stages}


def _mma_config(block_n: int, block_m: int, block_k: int, warps: int, stages: int, split: int = 1,
                group: int = 8) -> dict:
    return {"kernel": "mma", "BLOCK_N": block_n, "BLOCK_M": block_m, "BLOCK_K": block_k, "SPLIT_K": split,
            "GROUP_N": group, "num_warps": warps, "num_stages": stages}


def _mma_ss_config(block_m: int, block_n: int, block_k: int, warps: int, stages: int, group: int = 8) -> dict:
    return {"kernel": "mma_ss", "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": group,
            "num_warps": warps, "num_stages": stages}


def _tma_wgmma_config(block_m: int, block_n: int, block_k: int, warps: int, stages: int, group: int = 8,
                      persistent: bool = False, stream_k: bool = False) -> dict:
    """The Gluon kernel of :mod:`quantkit.kernels.wo_gemm_sm90` (sm_90, 16-bit x, K % 16 == 0): the
    converted weight as wgmma's register operand. ``persistent``: one program per SM looping over
    tiles; ``stream_k`` (persistent): the last partial wave's tiles are split along K over every
    program (``wo_gemm_sm90.stream_k_split``). Where it cannot run, the default config for the
    problem's M runs instead."""
    cfg = {"kernel": "tma_wgmma", "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": group,
           "num_warps": warps, "num_stages": stages}
    if persistent or stream_k:
        cfg["PERSISTENT"] = True
    if stream_k:
        cfg["STREAM_K"] = True
    return cfg


def _decode_config(mt: int, wk: int, wm: int = 1, dk: int = 64, sub: int = 1, xpf: bool = True,
                   diag: bool = False, dg: int | None = None) -> dict:
    """The Gluon decode kernel of :mod:`quantkit.kernels.wo_decode_sm90` (sm_90, M <= 16, 16-bit x,
    K % DK == 0): the weight loaded straight into mma.sync fragments; 16·MT·WM rows per program, WK
    warps splitting K in DK-deep chunks (SUB per warp and trip), ``xpf``: x loaded a trip ahead;
    ``diag`` (used at M <= 4): 8 / M consecutive chunks of a row a slot, 16·MT·WM·M / 8 rows a program;
    ``dg`` (with ``diag``): at most that many (``wo_decode_sm90.diag_chunks``). Where it cannot run, the
    default config for the problem's M runs instead."""
    cfg = {"kernel": "decode", "MT": mt, "WK": wk, "WM": wm, "DK": dk, "SUB": sub, "XPF": xpf}
    if diag:
        cfg["DIAG"] = True
    if dg is not None:
        cfg["DG"] = dg
    return cfg


# What each kind of config must name, what it may name besides, and which keys are powers of two.
_KEYS = {
    "gemv": ("BLOCK_N", "BLOCK_K", "num_warps"),
    "stream": ("BLOCK_N", "BLOCK_M", "BLOCK_K", "num_warps", "num_stages"),
    "mma": ("BLOCK_N", "BLOCK_M", "BLOCK_K", "num_warps", "num_stages"),
    "mma_ss": ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"),
    "tma_wgmma": ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages"),
    "decode": ("MT", "WK", "WM", "DK"),
}
_OPTIONAL_KEYS = {"gemv": ("num_stages",), "stream": (), "mma": ("SPLIT_K", "GROUP_N"), "mma_ss": ("GROUP_M",),
                  "tma_wgmma": ("PERSISTENT", "STREAM_K"),
                  "decode": ("SUB", "XPF", "DIAG", "DG", "TILED", "L2PF", "MAXNREG")}
_KINDS = key_sets(_KEYS, _OPTIONAL_KEYS)
_POW2_KEYS = {"gemv": ("BLOCK_N", "BLOCK_K", "num_warps"), "stream": ("BLOCK_N", "BLOCK_M", "BLOCK_K", "num_warps"),
              "mma": ("BLOCK_N", "BLOCK_M", "BLOCK_K", "num_warps"),
              "mma_ss": ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"), "tma_wgmma": (),
              "decode": ("MT", "WK", "WM", "DK")}


def check_config_entry(config: dict) -> None:
    """A ValueError for a config this family cannot run (what ``tuning`` checks a user-cache entry with)."""
    _check_config(config)


def _check_config(config: dict) -> None:
    """A ValueError naming the family and the config for one this module cannot launch (``configs.check_keys``,
    then a decode DK / L2PF or a ``tma_wgmma`` tile its kernel cannot take)."""
    kind = check_keys(FAMILY, config, _KINDS, _POW2_KEYS)
    if kind == "tma_wgmma":
        from quantkit.kernels.wo_gemm_sm90 import check_config

        check_config(config, FAMILY)
    if kind == "decode":
        from quantkit.kernels.wo_decode_sm90 import l2_prefetch

        if config["DK"] not in (64, 128) or config["WK"] * config["WM"] > 16:
            raise ValueError(f"int8_weight_only decode config: DK must be 64 or 128 and WK·WM <= 16, got {config!r}")
        l2_prefetch(config)


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def _split_plan(k: int, block_k: int, split: int) -> tuple[int, int]:
    """(iterations per split, number of splits): the largest split count ≤ ``split`` that divides
    the K iterations evenly, so every program runs the same trip count and none is empty."""
    iters = ceil_div(k, block_k)
    split = max(1, min(int(split), iters))
    while iters % split:
        split -= 1
    return iters // split, split


def _split_for(programs: int, iters: int, target: int, min_iters: int) -> int:
    """The smallest power-of-two split that brings ``programs * split`` to ~``target`` (within 10 %)
    while each split keeps at least ``min_iters`` K iterations (fewer would make the workspace cost
    more than it saves)."""
    split = 1
    while programs * split < 0.9 * target and iters // (split * 2) >= min_iters:
        split *= 2
    return split


def _stream_block_n(N: int) -> int:
    """32 weight rows per program when that still gives ≥ 2 programs per SM (x, re-read from L2 by
    every program, then costs no more than the weight), else 16."""
    return 32 if ceil_div(N, 32) >= 2 * _NUM_SMS_H100 else 16


def _mma_default(M: int, N: int, K: int) -> dict:
    """The Triton wgmma kernel's config for 16 < M <= 256: what runs there where the Gluon kernel cannot
    (not sm_90, float32 x, K % 16 != 0, unaligned rows)."""
    if M <= 64:
        block_m = max(16, _pow2_at_least(M))
        split = _split_for(ceil_div(N, 64), ceil_div(K, 128), 2 * _NUM_SMS_H100, 4)
        return _mma_config(64, block_m, 128, 4, 4, split)
    return _mma_config(64, 128, 128, 4, 4)


def default_config(M: int, N: int, K: int) -> dict:
    """A heuristic config, valid for every problem (the tuned tables override it per GPU)."""
    if M == 1:
        # DIAG decode programs (sm_90; elsewhere _plan's fallback, the GEMV): the H100 sweep's pick on every
        # Llama shape but the lm_head, where the GEMV keeps the lead (notes/int8_weight_only.md, round 14)
        return _decode_config(1, 1, xpf=False, diag=True) if N < 65536 else _gemv_config(8, 1024, 4, 3)
    if M <= 4 and N < 65536:
        # DIAG decode programs (4 or 2 chunks a slot; sm_90, the stream kernel elsewhere): the fastest or
        # within 8 % on the Llama shapes at M = 2-4, where the M = 16 entries were up to 1.5x slower
        return _decode_config(1, 4, diag=True)
    if M <= 16:
        if 8192 <= N < 65536:
            # The Gluon decode kernel, 32 rows a program (sm_90; the stream kernel elsewhere): the H100
            # sweeps' pick at 14336x4096, 18944x3584 and 13824x5120, 16-18 % ahead of this stream default
            # on the last two (notes/int8_weight_only.md, round 14)
            return _decode_config(2, 4)
        block_n = _stream_block_n(N)
        return _stream_config(block_n, 512 if block_n == 16 else 256, 4, 4)
    if M <= 64 and N <= 1024:
        # Narrow layers (k / v projections) in batched decoding: the M = 16 stream program in 16-row x tiles,
        # N / 16 programs each, against the Gluon GEMM's N / 64 tiles cut along K: 1.04-1.25x of bf16 where the
        # Gluon kernel ran 0.80-0.99x at N = 512-1024, M = 17-64 on an H100 (notes/int8_weight_only.md, round 32)
        return _stream_config(16, 512, 4, 4)
    if M <= 256:
        # The Gluon register-operand kernel (its fallback: _mma_default): on the H100 it took M = 128 from
        # 0.90 / 1.06 / 1.14x of bf16 (the Triton kernel) to 1.13-1.42x (notes/int8_weight_only.md, round 20)
        from quantkit.kernels.wo_gemm_sm90 import mid_m_config

        return mid_m_config(M, N, K, _NUM_SMS_H100)
    # The Gluon register-operand kernel (sm_90, 16-bit x, K % 16 == 0; mma_ss 256x128x64 elsewhere):
    # 1.6-1.8x faster than mma_ss and 1.2-1.3x faster than round 4's shared-operand Gluon kernels in
    # the H100 sweep. 256 x rows per tile: each converted weight
    # fragment serves 256 rows (notes/int8_weight_only.md, round 5). Persistent with stream-K where the
    # last wave is at most half full (round 33).
    from quantkit.kernels.wo_gemm_sm90 import large_m_config

    return large_m_config(M, N, K, _NUM_SMS_H100)


def candidate_configs(M: int, N: int, K: int) -> list[dict]:
    """The search space of the offline sweep for one problem (≤ 8 configs). SPLIT_K is a runtime
    argument of the mma kernel, so configs that differ only in it share one compilation."""
    default = default_config(M, N, K)
    if M == 1:
        cands = [
            _gemv_config(16, 512, 4, 3),
            _gemv_config(8, 512, 4, 3),
            _gemv_config(8, 1024, 4, 3),
            _gemv_config(8, 512, 4, 1),
            _stream_config(16, 512, 4, 4),
            # (in the place of the decode kernel's MT 1 / WK 4, which no sweep picked: 7 % faster than the
            # decode kernel at 4096 x 14336 in a wider probe, notes/int8_weight_only.md, round 13)
            _gemv_config(8, 1024, 4, 1),
            # DIAG (one row's eight consecutive chunks a slot: 512 contiguous bytes a warp load) in the place
            # of the decode kernel's WK 8 configs, which no sweep picked (notes/int8_weight_only.md, round 14)
            _decode_config(1, 1, xpf=False, diag=True),
            _decode_config(1, 2, xpf=False, diag=True),
        ]
    elif M <= 4:
        # DIAG at M = 2-4 (4 or 2 chunks of a row a slot in the x tile's idle columns): 6-35 % ahead of
        # what the M = 16 entries gave there on the Llama shapes (notes/int8_weight_only.md, round 14)
        cands = [
            _stream_config(16, 512, 4, 4),
            _decode_config(2, 4),
            _decode_config(1, 4, diag=True),
            _decode_config(2, 4, diag=True),
            _decode_config(1, 1, xpf=False, diag=True),
            _decode_config(1, 2, xpf=False, diag=True),
            _decode_config(2, 2, diag=True),
        ]
        if N >= 8192:
            cands.append(_tma_wgmma_config(16, 64, 256, 4, 4))
    elif M <= 16:
        cands = [
            _stream_config(16, 512, 4, 4),
            # two warps (two K slices a step) in the place of three stages, which no sweep had picked: 14.8
            # against 15.1 µs at 4096² M = 16, faster in 14 of 16 alternating rounds on two H100s (level in one,
            # 0.1 µs slower in one) and in 9 of 9 on an H200; level at 4096 x 14336 (notes/int8_weight_only.md,
            # round 30)
            _stream_config(16, 512, 2, 4),
            _stream_config(16, 256, 4, 4),
            _stream_config(32, 256, 4, 4),
            _stream_config(32, 512, 4, 3),
            _decode_config(2, 4),
        ]
        if M > 1 and N >= 8192:
            # The register-operand Gluon kernel with 16 x rows a tile streams 64 weight rows per
            # program from a TMA ring: 7 % faster than `stream` at 14336 x 4096, M = 16 (H100 probe;
            # 1.2-1.8x slower where N / 64 programs leave SMs idle, and at M = 1).
            cands.append(_tma_wgmma_config(16, 64, 256, 4, 4))
    elif M <= 256:
        # The Gluon kernel's tiles that led the H100 probe at M = 128 (notes/int8_weight_only.md, round 20);
        # the Triton kernel's configs, which the sweeps had shipped before, were 13-30 % behind at M = 128-256
        bm = 64 if M <= 64 else 128
        cands = [
            _tma_wgmma_config(bm, 64, 128, 4, 4, stream_k=True),
            _tma_wgmma_config(bm, 128, 128, 8, 4, stream_k=True),
            _tma_wgmma_config(64, 64, 128, 4, 6),
            _tma_wgmma_config(bm, 128, 128, 8, 4),
            _tma_wgmma_config(256, 128, 64, 8, 4, stream_k=True) if M > 128
            else _tma_wgmma_config(64, 128, 128, 8, 6, stream_k=True),
        ]
        if M <= 64:  # at M = 32-64 on 4096 x 4096 the Triton kernel still led (by 3-8 %)
            cands.append(_mma_default(M, N, K))
            cands.append(_stream_config(16, 512, 4, 4))  # narrow layers (round 32)
    else:
        cands = [
            _mma_ss_config(256, 128, 64, 8, 3),
            _tma_wgmma_config(256, 128, 64, 8, 4),
            _tma_wgmma_config(256, 128, 64, 8, 5),
            _tma_wgmma_config(256, 128, 64, 8, 4, persistent=True),
            _tma_wgmma_config(256, 128, 64, 8, 5, persistent=True),
            _tma_wgmma_config(256, 128, 64, 8, 4, stream_k=True),
            _tma_wgmma_config(256, 128, 64, 8, 5, stream_k=True),
        ]
    if default not in cands:
        cands.insert(0, default)
    unique: list[dict] = []
    for c in cands:
        if c not in unique:
            unique.append(c)
    return unique[:8]


def make_bench_inputs(N: int, K: int, dtype: torch.dtype) -> tuple:
    """(weight_q, weight_scale, bias) for ``linear`` on CUDA: weights ~ N(0, 0.02²) quantized per
    channel; no bias (as in the Llama layers PERFORMANCE.md measures)."""
    from quantkit.reference.int8 import quantize_weight_int8_per_channel

    w = (torch.randn(N, K, device="cuda") * 0.02).to(dtype)
    weight_q, weight_scale = quantize_weight_int8_per_channel(w)
    return weight_q, weight_scale, None


# --------------------------------------------------------------------------- launcher
def _check(x: torch.Tensor, weight_q: torch.Tensor, weight_scale: torch.Tensor, bias) -> tuple[int, int, int]:
    where = "int8_weight_only.linear"
    if x.dim() != 2:
        raise ValueError(f"{where}: x must be 2-D [M, K], got shape {tuple(x.shape)}")
    if x.dtype not in _X_DTYPES:
        raise TypeError(f"{where}: x dtype must be bfloat16, float16 or float32, got {x.dtype}")
    if x.shape[1] > 1 and x.stride(1) != 1:
        raise ValueError(f"{where}: x must have a contiguous last dimension, got strides {tuple(x.stride())}")
    if weight_q.dtype != torch.int8 or weight_q.dim() != 2:
        raise TypeError(f"{where}: weight_q must be a 2-D int8 tensor [N, K], got {weight_q.dtype} "
                        f"shape {tuple(weight_q.shape)}")
    if not weight_q.is_contiguous():
        raise ValueError(f"{where}: weight_q must be contiguous (row-major [N, K]), got strides "
                         f"{tuple(weight_q.stride())}")
    n, k = weight_q.shape
    if x.shape[1] != k:
        raise ValueError(f"{where}: x has K={x.shape[1]} but weight_q is [N={n}, K={k}]")
    if k == 0:
        raise ValueError(f"{where}: K must be positive")
    if weight_scale.dtype not in _SCALE_DTYPES:
        raise TypeError(f"{where}: weight_scale dtype must be float32, bfloat16 or float16, got {weight_scale.dtype}")
    if weight_scale.numel() != n or weight_scale.dim() > 2 or not weight_scale.is_contiguous():
        raise ValueError(f"{where}: weight_scale must be a contiguous [N={n}] (or [N, 1]) tensor, got shape "
                         f"{tuple(weight_scale.shape)} strides {tuple(weight_scale.stride())}")
    if bias is not None:
        if not bias.is_floating_point() or bias.numel() != n or bias.dim() != 1 or not bias.is_contiguous():
            raise ValueError(f"{where}: bias must be a contiguous floating-point [N={n}] tensor, got {bias.dtype} "
                             f"shape {tuple(bias.shape)}")
    for name, t in (("weight_q", weight_q), ("weight_scale", weight_scale), ("bias", bias)):
        if t is not None and t.device != x.device:
            raise ValueError(f"{where}: {name} is on {t.device} but x is on {x.device}")
    return x.shape[0], n, k


def _bench(x, weight_q, weight_scale, bias, config: dict) -> float:
    import triton.testing

    fn = lambda: linear(x, weight_q, weight_scale, bias, config=config)  # noqa: E731
    fn()
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")


def dequantize_weight(weight_q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The reference's ``dequantize_weight_int8`` in one pass: int8 [N, K] and scale [N] (or [N, 1]) ->
    [N, K] in ``dtype`` (the layers' input gradient multiplies by it)."""
    if weight_q.dim() != 2 or weight_q.dtype != torch.int8:
        raise ValueError(f"weight_q must be a 2-D int8 tensor, got {weight_q.dtype} {tuple(weight_q.shape)}")
    n, k = weight_q.shape
    scale = scale.reshape(-1)
    if scale.numel() != n or scale.dtype not in _SCALE_DTYPES:
        raise ValueError(f"weight_scale must hold {n} float values, got {scale.dtype} {tuple(scale.shape)}")
    if dtype not in _X_DTYPES:
        raise TypeError(f"dtype must be bf16/fp16/fp32, got {dtype}")
    weight_q, scale = weight_q.contiguous(), scale.contiguous()
    out = torch.empty((n, k), dtype=dtype, device=weight_q.device)
    if n and k:
        _dequant_fast[(ceil_div(n, 32), ceil_div(k, 256))](weight_q, scale, out, n, k, weight_q.stride(0),
                                                          out.stride(0), BLOCK_N=32, BLOCK_K=256, num_warps=4)
    return out


def linear(x: torch.Tensor, weight_q: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None = None,
           *, config: dict | None = None) -> torch.Tensor:
    """``x`` [M, K] · int8 ``weight_q`` [N, K]^T · ``weight_scale`` [N] (+ ``bias``) -> [M, N] in x.dtype."""
    M, N, K = _check(x, weight_q, weight_scale, bias)
    if M == 0 or N == 0:
        return torch.empty((M, N), dtype=x.dtype, device=x.device)
    if config is None:
        if x.device.type == "cuda":
            config = tuning.get_config(FAMILY, M, N, K, module=sys.modules[__name__],
                                       bench=functools.partial(_bench, x, weight_q, weight_scale, bias))
            if M > 256:  # 256-row tiles at M between the tuned buckets: mostly padding past a multiple of 256
                from quantkit.kernels.wo_gemm_sm90 import fit_rows

                config = fit_rows(config, M)
        else:  # the interpreter: no GPU to have tuned tables for
            config = default_config(M, N, K)
    _check_config(config)
    if config.get("kernel") == "tma_wgmma":
        from quantkit.kernels import wo_gemm_sm90

        if wo_gemm_sm90.usable(x, weight_q):
            return wo_gemm_sm90.launch(x, weight_q, weight_scale, bias, config)
    if config.get("kernel") == "decode":
        from quantkit.kernels import wo_decode_sm90

        if M <= 16 and wo_decode_sm90.usable_int8(x, weight_q, config):
            out = torch.empty((M, N), dtype=x.dtype, device=x.device)
            wo_decode_sm90.launch_int8(x, weight_q, weight_scale, bias, out, config)
            return out
    splits = _partial_splits(x, M, N, K, config)
    part = None
    if splits > 1:  # the float32 partials live behind the output, in its allocation
        out, ws = out_with_workspace(M, N, x.dtype, x.device, 4 * splits * M * N)
        part = ws.view(torch.float32).view(splits, M, N)
    else:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    for fast, grid, args, kwargs in _plan(x, weight_q, weight_scale, bias, out, M, N, K, config, part):
        fast[grid](*args, **kwargs)
    return out


def _resolved(x, M, N, K, cfg) -> tuple[str, dict]:
    """(kernel kind, config) that :func:`_plan` launches for ``cfg`` on these inputs: the Gluon kinds
    fall back to a Triton kernel where they cannot run (linear() tries them first), and ``mma_ss`` to
    ``mma`` on rows that are not 16-byte aligned."""
    kind = cfg.get("kernel")
    if kind in ("tma_wgmma", "decode"):
        cfg = default_config(M, N, K)
        if cfg["kernel"] in ("tma_wgmma", "decode"):
            cfg = (_mma_ss_config(256, 128, 64, 8, 3) if M > 256 else _mma_default(M, N, K) if M > 16
                   else _gemv_config(16, 512, 4, 3) if M == 1 else _stream_config(16, 512, 4, 4))
        kind = cfg["kernel"]
    if kind == "mma_ss" and not _rows_aligned(x, K):
        # Element-wise loads and no cp.async: the register-operand kernel's safe tile fits better.
        kind, cfg = "mma", _mma_config(128, 64, 64, 8, 3)
    return kind, cfg


def _partial_splits(x, M, N, K, cfg) -> int:
    """How many float32 [M, N] split-K partial planes :func:`_plan` needs for ``cfg`` (1: none)."""
    kind, cfg = _resolved(x, M, N, K, cfg)
    if kind != "mma":
        return 1
    return _split_plan(K, _mma_tiles(cfg, x, K)[2], cfg.get("SPLIT_K", 1))[1]


def _plan(x, weight_q, weight_scale, bias, out, M, N, K, cfg, part=None) -> list[tuple]:
    """The launches that compute ``out`` with config ``cfg``: [(cached kernel, grid, args, kwargs)].
    ``part``: the float32 [splits, M, N] split-K partials where the config splits K (``linear`` carves
    them from the output's allocation; left out, they are allocated here).
    (Also what the tests compile for sm_90 to check registers, shared memory and the SASS.)"""
    kind, cfg = _resolved(x, M, N, K, cfg)
    bias_arg = bias if bias is not None else weight_scale  # never read without HAS_BIAS
    if kind == "gemv":
        block_n, block_k = int(cfg["BLOCK_N"]), int(cfg["BLOCK_K"])
        iters = ceil_div(K, block_k)
        return [(_gemv_fast, (M * ceil_div(N, block_n),),
                 (x, weight_q, weight_scale, bias_arg, out, M, N, K, x.stride(0), weight_q.stride(0), iters),
                 dict(LOOP_TRIPS=iters if _INTERPRETED else 0, HAS_BIAS=bias is not None, EVEN_K=K % block_k == 0,
                      BLOCK_N=block_n, BLOCK_K=block_k, STAGES=int(cfg.get("num_stages", 1)),
                      num_warps=int(cfg["num_warps"]), num_stages=1))]
    if kind == "stream":
        block_n, block_m, block_k, warps, stages = _stream_tiles(cfg, x, K)
        iters = ceil_div(K, block_k)
        return [(_stream_fast, (ceil_div(N, block_n) * ceil_div(M, block_m),),
                 (x, weight_q, weight_scale, bias_arg, out, M, N, K, x.stride(0), weight_q.stride(0), iters),
                 dict(LOOP_TRIPS=iters if _INTERPRETED else 0, HAS_BIAS=bias is not None, EVEN_K=K % block_k == 0,
                      X_BCAST=M == 1, DOT_DTYPE=_dot_dtype(x), TF32X3=x.dtype == torch.float32,
                      BLOCK_N=block_n, BLOCK_M=block_m, BLOCK_K=block_k, KSPLIT=warps, STAGES=stages,
                      num_warps=warps, num_stages=1))]
    if kind == "mma":
        block_n, block_m, block_k, warps, stages = _mma_tiles(cfg, x, K)
        iters, splits = _split_plan(K, block_k, cfg.get("SPLIT_K", 1))
        if splits == 1:
            part = out
        elif part is None:
            part = torch.empty((splits, M, N), dtype=torch.float32, device=out.device)
        elif tuple(part.shape) != (splits, M, N) or part.dtype != torch.float32:
            raise ValueError(f"int8_weight_only: split-K partials must be float32 {(splits, M, N)}, got "
                             f"{part.dtype} {tuple(part.shape)}")
        plan = [(_mma_fast, (ceil_div(N, block_n) * ceil_div(M, block_m), splits),
                 (x, weight_q, weight_scale, bias_arg, part, M, N, K, x.stride(0), weight_q.stride(0), iters),
                 dict(LOOP_TRIPS=iters if _INTERPRETED else 0, HAS_BIAS=bias is not None, PARTIAL=splits > 1,
                      EVEN_K=K % block_k == 0, DOT_DTYPE=_dot_dtype(x), TF32X3=x.dtype == torch.float32,
                      BLOCK_N=block_n, BLOCK_M=block_m, BLOCK_K=block_k, GROUP_N=int(cfg.get("GROUP_N", 8)),
                      num_warps=warps, num_stages=stages))]
        if splits > 1:
            plan.append((_splitk_epilogue_fast, (M, ceil_div(N, _EPILOGUE_BLOCK)),
                         (part, weight_scale, bias_arg, out, M, N, splits),
                         dict(LOOP_TRIPS=splits if _INTERPRETED else 0, HAS_BIAS=bias is not None,
                              BLOCK=_EPILOGUE_BLOCK, num_warps=4)))
        return plan
    if kind == "mma_ss":
        block_m, block_n, block_k, warps, stages = _mma_ss_tiles(cfg, x, K)
        iters = ceil_div(K, block_k)
        return [(_mma_ss_fast, (ceil_div(M, block_m) * ceil_div(N, block_n),),
                 (x, weight_q, weight_scale, bias_arg, out, M, N, K, x.stride(0), weight_q.stride(0), iters),
                 dict(LOOP_TRIPS=iters if _INTERPRETED else 0, HAS_BIAS=bias is not None, EVEN_K=K % block_k == 0,
                      DOT_DTYPE=_dot_dtype(x), TF32X3=x.dtype == torch.float32, BLOCK_M=block_m, BLOCK_N=block_n,
                      BLOCK_K=block_k, GROUP_M=int(cfg.get("GROUP_M", 8)), num_warps=warps, num_stages=stages))]
    raise ValueError(f"int8_weight_only.linear: config['kernel'] must be 'gemv', 'stream', 'mma', 'mma_ss' or "
                     f"'tma_wgmma', "
                     f"got {kind!r}")


def _rows_aligned(x: torch.Tensor, K: int) -> bool:
    """Every x and weight row starts 16-byte aligned (vector loads and cp.async possible)."""
    return K % 16 == 0 and (x.stride(0) * x.element_size()) % 16 == 0 and x.data_ptr() % 16 == 0


def _dot_dtype(x: torch.Tensor):
    if _INTERPRETED and x.dtype == torch.bfloat16:
        return tl.float32  # numpy has no bf16 matmul; bf16 values are exact in float32
    return _TL_DTYPE[x.dtype]


def _stream_tiles(cfg: dict, x: torch.Tensor, K: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_N, BLOCK_M, BLOCK_K, num_warps, num_stages) to launch ``cfg`` with on these inputs."""
    block_n, block_m, block_k = int(cfg["BLOCK_N"]), int(cfg["BLOCK_M"]), int(cfg["BLOCK_K"])
    warps, stages = int(cfg["num_warps"]), int(cfg["num_stages"])
    if x.dtype == torch.float32:
        # Tables are tuned on 16-bit activations; tf32x3 keeps three operand copies and 4-byte x
        # tiles, so cap the K step at what is known to fit (233 registers at 32x16x256, no spills).
        block_k, stages = min(block_k, 256), min(stages, 3)
    if not _rows_aligned(x, K):
        # Element-wise loads: a 512-wide step spills at M = 1 (ptxas), 256 does not.
        block_k = min(block_k, 256)
    # A short K needs no wide step (dot tiles need ≥ 16 per warp slice).
    block_k = max(16 * warps, min(block_k, _pow2_at_least(K)))
    return block_n, block_m, block_k, warps, stages


def _mma_tiles(cfg: dict, x: torch.Tensor, K: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_N, BLOCK_M, BLOCK_K, num_warps, num_stages) to launch ``cfg`` with on these inputs."""
    block_n, block_m, block_k = int(cfg["BLOCK_N"]), int(cfg["BLOCK_M"]), int(cfg["BLOCK_K"])
    warps, stages = int(cfg["num_warps"]), int(cfg["num_stages"])
    if not _rows_aligned(x, K):
        # Rows not 16-byte aligned: no vector loads, no cp.async pipelining, every element its own
        # load. Large tiles then run out of registers; this one does not (checked with ptxas).
        block_n, block_m, block_k, warps, stages = 128, min(block_m, 64), 64, 8, 3
    if x.dtype == torch.float32:
        # Tables are tuned on 16-bit activations; tf32x3 needs 3 operand copies in registers and
        # 4-byte x tiles in shared memory, so shrink the tile to what is known to fit.
        block_n, block_m, block_k, stages = min(block_n, 128), min(block_m, 128), min(block_k, 32), min(stages, 3)
    return block_n, block_m, block_k, warps, stages


def _mma_ss_tiles(cfg: dict, x: torch.Tensor, K: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) to launch ``cfg`` with on these inputs."""
    block_m, block_n, block_k = int(cfg["BLOCK_M"]), int(cfg["BLOCK_N"]), int(cfg["BLOCK_K"])
    warps, stages = int(cfg["num_warps"]), int(cfg["num_stages"])
    if x.dtype == torch.float32:
        # tf32x3 splits x into two tf32 tiles and needs 4-byte operand tiles in shared memory.
        block_m, block_n, block_k, stages = min(block_m, 128), min(block_n, 128), min(block_k, 32), min(stages, 3)
    return block_m, block_n, block_k, warps, stages
