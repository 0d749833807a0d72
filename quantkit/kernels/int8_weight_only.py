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
    gemv  CUDA cores, for M = 1 (valid for any M: one program per row and weight tile, programs of
          the same tile adjacent so that rows after the first hit L2). Each thread streams 16 B of
          int8 per row chunk, dequantizes in registers, FMAs into a [BLOCK_N, BLOCK_K] float32
          accumulator, reduced once at the end.
    mma   tensor cores ("swap AB"): computes Y^T tiles = W_tile · X_tile^T so that the dequantized
          weight tile is the left operand of ``tl.dot`` (registers on sm_90's wgmma; the activation
          tile is read from shared memory), software-pipelined over K, grouped tile order for L2 reuse.
          Small M uses BLOCK_M = 16..64 tiles with split-K; large M uses 128x128..128x256 tiles.
    Split-K (either kernel, ``SPLIT_K > 1``): every split writes float32 partial sums to a
    workspace [splits, M, N] and ``_splitk_epilogue_kernel`` adds them in a fixed order, applies
    scale and bias and casts. Chosen over atomics because the result is deterministic, nothing has
    to be zeroed first (an atomic scheme needs a zeroed float32 buffer plus a cast pass anyway: two
    extra launches instead of one), and the sum stays in float32 as the reference has it. The
    workspace comes from PyTorch's caching allocator (no cudaMalloc after warm-up; CUDA-graph safe).

Dequantization: q + 128 is placed in the low mantissa byte of 2^23 with integer ops and one float32
subtraction of (2^23 + 128) leaves q exactly. The hardware int→float conversion (I2F) issues at a
quarter of the FMA rate on sm_90 and would co-limit the GEMV at full HBM bandwidth; the integer
ops + FADD run at full rate. Then float32 → bf16/fp16 is exact (|q| ≤ 128 needs 8 bits).

float32 activations: the GEMV multiplies in exact float32; the tensor-core kernel uses
``input_precision="tf32x3"`` (split-operand tf32, ~float32 accuracy; the int8 weight is exact in
tf32, so only x is split). Plain tf32 would lose ~3 decimal digits of x.

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

MIN_CAPABILITY = (8, 0)
FAMILY = "int8_weight_only"

_X_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_SCALE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_EPILOGUE_BLOCK = 512
_NUM_SMS_H100 = 132  # sizing heuristic for split-K; the tuned tables replace it per GPU


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


@triton.jit(do_not_specialize=["M"])
def _gemv_kernel(x_ptr, w_ptr, scale_ptr, bias_ptr, out_ptr, M, N, K, stride_xm, stride_wn, ITERS,
                 LOOP_TRIPS: tl.constexpr, HAS_BIAS: tl.constexpr, PARTIAL: tl.constexpr,
                 EVEN_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr):
    """Grid (M * cdiv(N, BLOCK_N), splits). Program (pid, s) computes rows of weight tile pid // M
    for activation row pid % M over K iterations [s * ITERS, (s + 1) * ITERS)."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = pid % M  # rows of one weight tile are neighbours: the 2nd..Mth read it from L2
    pid_n = pid // M
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Out-of-range rows re-read the last row instead of being masked, so loads need no row mask
    # (their results are never stored).
    rows = tl.minimum(offs_n, N - 1)
    offs_k = pid_k * ITERS * BLOCK_K + tl.arange(0, BLOCK_K)
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
    y = tl.sum(acc, axis=1)
    n_ok = offs_n < N
    if PARTIAL:
        tl.store(out_ptr + (pid_k * M + pid_m).to(tl.int64) * N + offs_n, y, mask=n_ok)
    else:
        y = y * tl.load(scale_ptr + rows).to(tl.float32)
        if HAS_BIAS:
            y += tl.load(bias_ptr + rows).to(tl.float32)
        tl.store(out_ptr + pid_m.to(tl.int64) * N + offs_n, y.to(out_ptr.dtype.element_ty), mask=n_ok)


@triton.jit(do_not_specialize=["M"])
def _mma_kernel(x_ptr, w_ptr, scale_ptr, bias_ptr, out_ptr, M, N, K, stride_xm, stride_wn, ITERS,
                LOOP_TRIPS: tl.constexpr, HAS_BIAS: tl.constexpr, PARTIAL: tl.constexpr, EVEN_K: tl.constexpr,
                DOT_DTYPE: tl.constexpr, TF32X3: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_K: tl.constexpr, GROUP_N: tl.constexpr):
    """Grid (cdiv(N, BLOCK_N) * cdiv(M, BLOCK_M), splits). Each program accumulates the transposed
    output tile acc[BLOCK_N, BLOCK_M] = W[n-tile, k-range] · X[m-tile, k-range]^T."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_m = tl.cdiv(M, BLOCK_M)
    # GROUP_N weight tiles are swept across every activation tile before the next group starts, so
    # the programs in flight share their weight and activation tiles in L2.
    per_group = GROUP_N * tiles_m
    first_n = (pid // per_group) * GROUP_N
    group_size = tl.minimum(tiles_n - first_n, GROUP_N)
    pid_n = first_n + (pid % per_group) % group_size
    pid_m = (pid % per_group) // group_size
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
        w_ptrs += BLOCK_K
        x_ptrs += BLOCK_K
    mask = (offs_n < N)[:, None] & (offs_m < M)[None, :]
    if PARTIAL:
        tl.store(out_ptr + (pid_k * M + offs_m).to(tl.int64)[None, :] * N + offs_n[:, None], acc, mask=mask)
    else:
        y = acc * tl.load(scale_ptr + rows_w).to(tl.float32)[:, None]
        if HAS_BIAS:
            y += tl.load(bias_ptr + rows_w).to(tl.float32)[:, None]
        tl.store(out_ptr + offs_m.to(tl.int64)[None, :] * N + offs_n[:, None], y.to(out_ptr.dtype.element_ty),
                 mask=mask)


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


# --------------------------------------------------------------------------- configs
def _gemv_config(block_n: int, block_k: int, warps: int, stages: int = 1, split: int = 1) -> dict:
    return {"kernel": "gemv", "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split,
            "num_warps": warps, "num_stages": stages}


def _mma_config(block_n: int, block_m: int, block_k: int, warps: int, stages: int, split: int = 1,
                group: int = 8) -> dict:
    return {"kernel": "mma", "BLOCK_N": block_n, "BLOCK_M": block_m, "BLOCK_K": block_k, "SPLIT_K": split,
            "GROUP_N": group, "num_warps": warps, "num_stages": stages}


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def _split_plan(k: int, block_k: int, split: int) -> tuple[int, int]:
    """(iterations per split, number of splits): the largest split count ≤ ``split`` that divides
    the K iterations evenly, so every program runs the same trip count and none is empty."""
    iters = triton.cdiv(k, block_k)
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


def _gemv_block_k(k: int) -> int:
    return min(512, max(32, _pow2_at_least(k)))


def default_config(M: int, N: int, K: int) -> dict:
    """A heuristic config, valid for every problem (the tuned tables override it per GPU)."""
    if M == 1:
        block_k = _gemv_block_k(K)
        block_n = min(64, 8192 // block_k)  # 64 weight bytes per thread at 4 warps
        # ~4 programs per SM: without pipelining each keeps only one tile in flight.
        split = _split_for(triton.cdiv(N, block_n), triton.cdiv(K, block_k), 4 * _NUM_SMS_H100, 4)
        return _gemv_config(block_n, block_k, 4, 1, split)
    if M <= 64:
        block_m = max(16, _pow2_at_least(M))
        block_k = 128 if K >= 128 else max(32, _pow2_at_least(K))
        split = _split_for(triton.cdiv(N, 64), triton.cdiv(K, block_k), 2 * _NUM_SMS_H100, 4)
        return _mma_config(64, block_m, block_k, 4, 4, split)
    tiles = triton.cdiv(N, 128) * triton.cdiv(M, 128)
    split = _split_for(tiles, triton.cdiv(K, 64), _NUM_SMS_H100, 8)
    return _mma_config(128, 128, 64, 8, 4, split)


def candidate_configs(M: int, N: int, K: int) -> list[dict]:
    """The search space of the offline sweep for one problem (≤ 8 configs). SPLIT_K is a runtime
    argument of the kernels, so configs that differ only in it share one compilation."""
    default = default_config(M, N, K)
    if M == 1:
        iters = triton.cdiv(K, 512)
        cands = [
            _gemv_config(16, 512, 4),
            _gemv_config(16, 512, 4, 1, min(2, iters)),
            _gemv_config(16, 512, 4, 1, min(4, iters)),
            _gemv_config(8, 512, 4),
            # cp.async-pipelined streams (tl.range num_stages): 2 more tiles in flight per program
            _gemv_config(8, 512, 4, 3),
            _gemv_config(8, 512, 4, 3, min(2, iters)),
            _gemv_config(16, 512, 4, 3),
            _gemv_config(16, 512, 4, 3, min(2, iters)),
        ]
    elif M <= 64:
        bm = max(16, _pow2_at_least(M))
        s64 = _split_for(triton.cdiv(N, 64), triton.cdiv(K, 128), 2 * _NUM_SMS_H100, 4)
        s128 = _split_for(triton.cdiv(N, 128), triton.cdiv(K, 128), 2 * _NUM_SMS_H100, 4)
        cands = [
            _mma_config(64, bm, 128, 4, 4, s64),
            _mma_config(64, bm, 128, 4, 4, 2 * s64),
            _mma_config(64, bm, 256, 4, 3, s64),
            _mma_config(128, bm, 128, 4, 4, s128),
            _mma_config(128, bm, 128, 8, 4, s128),
            _mma_config(128, bm, 256, 8, 3, s128),
        ]
        if M <= 4:
            cands.append(_gemv_config(16, 512, 4))
    elif M <= 256:
        def s(bn: int, bm: int, bk: int) -> int:
            return _split_for(triton.cdiv(N, bn) * triton.cdiv(M, bm), triton.cdiv(K, bk), _NUM_SMS_H100, 8)

        cands = [
            _mma_config(128, 128, 64, 8, 4, s(128, 128, 64)),
            _mma_config(128, 128, 64, 8, 4, 2 * s(128, 128, 64)),
            _mma_config(128, 128, 128, 8, 3, s(128, 128, 128)),
            _mma_config(64, 128, 128, 4, 4, s(64, 128, 128)),
            _mma_config(256, 128, 64, 8, 3, s(256, 128, 64)),
            _mma_config(64, 64, 128, 4, 4, s(64, 64, 128)),
        ]
    else:
        def s(bn: int, bm: int, bk: int) -> int:
            return _split_for(triton.cdiv(N, bn) * triton.cdiv(M, bm), triton.cdiv(K, bk), _NUM_SMS_H100 // 2, 8)

        cands = [
            _mma_config(128, 128, 64, 8, 4, s(128, 128, 64)),
            _mma_config(128, 256, 64, 8, 3, s(128, 256, 64)),
            _mma_config(256, 128, 64, 8, 3, s(256, 128, 64)),
            _mma_config(128, 128, 128, 8, 3, s(128, 128, 128)),
            _mma_config(128, 256, 128, 8, 2, s(128, 256, 128)),
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


def linear(x: torch.Tensor, weight_q: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None = None,
           *, config: dict | None = None) -> torch.Tensor:
    """``x`` [M, K] · int8 ``weight_q`` [N, K]^T · ``weight_scale`` [N] (+ ``bias``) -> [M, N] in x.dtype."""
    M, N, K = _check(x, weight_q, weight_scale, bias)
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return out
    if config is None:
        if x.device.type == "cuda":
            config = tuning.get_config(FAMILY, M, N, K, module=sys.modules[__name__],
                                       bench=functools.partial(_bench, x, weight_q, weight_scale, bias))
        else:  # the interpreter: no GPU to have tuned tables for
            config = default_config(M, N, K)
    kind = config.get("kernel")
    if kind == "gemv":
        _launch_gemv(x, weight_q, weight_scale, bias, out, M, N, K, config)
    elif kind == "mma":
        _launch_mma(x, weight_q, weight_scale, bias, out, M, N, K, config)
    else:
        raise ValueError(f"int8_weight_only.linear: config['kernel'] must be 'gemv' or 'mma', got {kind!r}")
    return out


def _workspace(splits: int, M: int, N: int, out: torch.Tensor) -> torch.Tensor:
    return out if splits == 1 else torch.empty((splits, M, N), dtype=torch.float32, device=out.device)


def _finish_split(part, weight_scale, bias, out, M, N, splits) -> None:
    if part is out:
        return
    grid = (M, triton.cdiv(N, _EPILOGUE_BLOCK))
    _splitk_epilogue_kernel[grid](part, weight_scale, bias if bias is not None else weight_scale, out, M, N, splits,
                                  LOOP_TRIPS=splits if _INTERPRETED else 0, HAS_BIAS=bias is not None,
                                  BLOCK=_EPILOGUE_BLOCK, num_warps=4)


def _launch_gemv(x, weight_q, weight_scale, bias, out, M, N, K, cfg) -> None:
    block_n, block_k = int(cfg["BLOCK_N"]), int(cfg["BLOCK_K"])
    iters, splits = _split_plan(K, block_k, cfg.get("SPLIT_K", 1))
    part = _workspace(splits, M, N, out)
    grid = (M * triton.cdiv(N, block_n), splits)
    _gemv_kernel[grid](
        x, weight_q, weight_scale, bias if bias is not None else weight_scale, part,
        M, N, K, x.stride(0), weight_q.stride(0), iters,
        LOOP_TRIPS=iters if _INTERPRETED else 0, HAS_BIAS=bias is not None, PARTIAL=splits > 1,
        EVEN_K=K % block_k == 0, BLOCK_N=block_n, BLOCK_K=block_k, STAGES=int(cfg.get("num_stages", 1)),
        num_warps=int(cfg["num_warps"]), num_stages=1,
    )
    _finish_split(part, weight_scale, bias, out, M, N, splits)


def _mma_tiles(cfg: dict, x: torch.Tensor, K: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_N, BLOCK_M, BLOCK_K, num_warps, num_stages) to launch ``cfg`` with on these inputs."""
    block_n, block_m, block_k = int(cfg["BLOCK_N"]), int(cfg["BLOCK_M"]), int(cfg["BLOCK_K"])
    warps, stages = int(cfg["num_warps"]), int(cfg["num_stages"])
    if K % 16 or (x.stride(0) * x.element_size()) % 16 or x.data_ptr() % 16:
        # Rows not 16-byte aligned: no vector loads, no cp.async pipelining, every element its own
        # load. Large tiles then run out of registers; this one does not (checked with ptxas).
        block_n, block_m, block_k, warps, stages = 128, min(block_m, 64), 64, 8, 3
    if x.dtype == torch.float32:
        # Tables are tuned on 16-bit activations; tf32x3 needs 3 operand copies in registers and
        # 4-byte x tiles in shared memory, so shrink the tile to what is known to fit.
        block_n, block_m, block_k, stages = min(block_n, 128), min(block_m, 128), min(block_k, 32), min(stages, 3)
    return block_n, block_m, block_k, warps, stages


def _launch_mma(x, weight_q, weight_scale, bias, out, M, N, K, cfg) -> None:
    block_n, block_m, block_k, warps, stages = _mma_tiles(cfg, x, K)
    iters, splits = _split_plan(K, block_k, cfg.get("SPLIT_K", 1))
    part = _workspace(splits, M, N, out)
    dot_dtype = _TL_DTYPE[x.dtype]
    if _INTERPRETED and x.dtype == torch.bfloat16:
        dot_dtype = tl.float32  # numpy has no bf16 matmul; bf16 values are exact in float32
    grid = (triton.cdiv(N, block_n) * triton.cdiv(M, block_m), splits)
    _mma_kernel[grid](
        x, weight_q, weight_scale, bias if bias is not None else weight_scale, part,
        M, N, K, x.stride(0), weight_q.stride(0), iters,
        LOOP_TRIPS=iters if _INTERPRETED else 0, HAS_BIAS=bias is not None, PARTIAL=splits > 1,
        EVEN_K=K % block_k == 0, DOT_DTYPE=dot_dtype, TF32X3=x.dtype == torch.float32,
        BLOCK_N=block_n, BLOCK_M=block_m, BLOCK_K=block_k, GROUP_N=int(cfg.get("GROUP_N", 8)),
        num_warps=warps, num_stages=stages,
    )
    _finish_split(part, weight_scale, bias, out, M, N, splits)
