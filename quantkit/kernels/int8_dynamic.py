"""int8 dynamic (W8A8) Triton kernels: per-token activation quantization and an int8 GEMM with the
scales, bias and output cast in its epilogue.

Numerics (those of :mod:`quantkit.reference.int8`, bit for bit on the GPU)::

    scale[r] = max(max_k |t[r, k]|, AMAX_EPS) / 127                       (float32, IEEE division)
    q[r, k]  = clamp(round_half_even(t[r, k] / scale[r]), -127, 127)       (int8, IEEE division)
    acc      = x_q @ w_q^T                                                 (exact, int32)
    y        = ((float32(acc) * x_scale[m]) * w_scale[n]) + float32(bias[n])   -> out dtype

``t`` is a [R, K] matrix: the activation ``x`` [M, K] (one scale per token) or the weight [N, K] (one
scale per output channel); one row-quantization kernel serves both. The epilogue is compiled without
FMA contraction so it rounds exactly like the reference's separate multiply and add.

Kernels
  * ``_quant_rows_kernel``: BLOCK_R rows per program. Rows up to 16384 wide are read once into
    registers (amax, then quantize); wider rows take two passes (the second read hits L2).
  * ``_gemm_kernel``: int8 ``tl.dot`` (wgmma on sm_90 for BLOCK_M >= 64, mma below), int32 accumulator,
    grouped launch order, software-pipelined loads; ``_gemm_tma_kernel`` is the same with host TMA
    descriptors (sm_90+, K % 16 == 0).
  * ``_fused_small_m_kernel``: for decode-size M, one launch: each program first reduces the amax of
    its rows over the whole K, then quantizes x tiles inside the K loop while it streams the weight.
    BLOCK_M = 1 is a GEMV on CUDA cores (int32 multiply + row sum), BLOCK_M = 16 uses ``tl.dot``.

Layouts: ``x`` [M, K] with unit stride along K (any row stride); ``weight_q`` int8 [N, K] contiguous
(nn.Linear's [out, in]); scales float32 [M] / [N]; ``bias`` [N] bf16/fp16/fp32; output [M, N]
contiguous in ``x.dtype`` (``gemm``: ``out_dtype``). Limits: K <= 133,144 (so that 127² · K fits in
int32); activations bf16, fp16 or fp32.

``linear`` picks a config per problem (``quantkit.kernels.tuning``: tuned table, else
``default_config``): ``{"kernel": "fused", ...}`` runs the single fused launch, ``{"kernel": "two_pass",
...}`` runs the row quantization then the GEMM. Split-K is not used: see notes/int8_dynamic.md.
"""
from __future__ import annotations

import functools
import os
import sys

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from quantkit.reference.common import AMAX_EPS

MIN_CAPABILITY = (8, 0)
FAMILY = "int8_dynamic"

# 127² · K must fit in an int32 accumulator.
MAX_K = (2**31 - 1) // (127 * 127)

# libdevice.rint (one cvt.rni) has no interpreter implementation; the floor-based rounding used there
# is exact too, just slower. Read once, as Triton itself reads it when the kernels are decorated.
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_SINGLE_PASS_MAX_K = 16384


def _loop_bound(k: int):
    """K as the kernels receive it. Under the interpreter (triton 3.6 with numpy >= 2.4) a runtime
    integer argument is a 1-element array that ``range()`` cannot take (``int()`` of a 1-d array is
    an error there), so K goes in as a constexpr; compiled kernels get a plain int."""
    return tl.constexpr(k) if _INTERPRET else k


# --------------------------------------------------------------------------- shared device code
@triton.jit
def _round_half_even(v, USE_RINT: tl.constexpr):
    if USE_RINT:
        r = libdevice.rint(v)
    else:
        f = tl.floor(v)
        d = v - f  # exact for float32
        r = tl.where(d > 0.5, f + 1.0, tl.where(d < 0.5, f, f + (f - 2.0 * tl.floor(f * 0.5))))
    return r


@triton.jit
def _quantize(v, scale, USE_RINT: tl.constexpr):
    """float32 values, float32 scale (broadcastable) -> int8 codes, as the reference rounds them."""
    r = _round_half_even(tl.math.div_rn(v, scale), USE_RINT)
    return tl.minimum(tl.maximum(r, -127.0), 127.0).to(tl.int8)


@triton.jit
def _epilogue(acc, offs_m, offs_n, M, N, a_scale_ptr, b_scale_ptr, bias_ptr, c_ptr, stride_cm,
              HAS_BIAS: tl.constexpr):
    m_mask = offs_m < M
    n_mask = offs_n < N
    a_s = tl.load(a_scale_ptr + offs_m, mask=m_mask, other=0.0)
    b_s = tl.load(b_scale_ptr + offs_n, mask=n_mask, other=0.0)
    y = acc.to(tl.float32) * a_s[:, None] * b_s[None, :]
    if HAS_BIAS:
        y = y + tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, y.to(c_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


@triton.jit
def _grouped_pid(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    # GROUP_M row-blocks are swept together column by column, so their x rows and the weight
    # columns they share stay in L2.
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    group_size = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_size
    pid_n = (pid % in_group) // group_size
    return pid_m, pid_n


# --------------------------------------------------------------------------- row quantization
@triton.jit
def _quant_rows_kernel(t_ptr, q_ptr, s_ptr, R, K, stride_tr, stride_qr,
                       EPS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
                       SINGLE_PASS: tl.constexpr, USE_RINT: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    r_mask = rows < R
    cols = tl.arange(0, BLOCK_K)
    t_rows = t_ptr + rows.to(tl.int64)[:, None] * stride_tr
    q_rows = q_ptr + rows.to(tl.int64)[:, None] * stride_qr
    if SINGLE_PASS:
        mask = r_mask[:, None] & (cols[None, :] < K)
        t = tl.load(t_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        scale = tl.math.div_rn(tl.maximum(tl.max(tl.abs(t), axis=1), EPS), 127.0)
        tl.store(q_rows + cols[None, :], _quantize(t, scale[:, None], USE_RINT), mask=mask)
    else:
        amax = tl.zeros([BLOCK_R], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            mask = r_mask[:, None] & (k0 + cols[None, :] < K)
            t = tl.load(t_rows + k0 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.max(tl.abs(t), axis=1))
        scale = tl.math.div_rn(tl.maximum(amax, EPS), 127.0)
        for k0 in range(0, K, BLOCK_K):
            mask = r_mask[:, None] & (k0 + cols[None, :] < K)
            t = tl.load(t_rows + k0 + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            tl.store(q_rows + k0 + cols[None, :], _quantize(t, scale[:, None], USE_RINT), mask=mask)
    tl.store(s_ptr + rows, scale, mask=r_mask)


# --------------------------------------------------------------------------- GEMM (pointer loads)
@triton.jit
def _gemm_kernel(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, bias_ptr, c_ptr, M, N, K,
                 stride_am, stride_bn, stride_cm,
                 HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    pid_m, pid_n = _grouped_pid(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Wrapping the edge rows/columns onto valid ones keeps M and N masks out of the K loop; the
    # duplicates are computed and then not stored.
    offs_am = (offs_m % M).to(tl.int64)
    offs_bn = (offs_n % N).to(tl.int64)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_bn[None, :] * stride_bn + offs_k[:, None]  # [BLOCK_K, BLOCK_N], K-major
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    _epilogue(acc, offs_m, offs_n, M, N, a_scale_ptr, b_scale_ptr, bias_ptr, c_ptr, stride_cm, HAS_BIAS)


# --------------------------------------------------------------------------- GEMM (TMA descriptors)
@triton.jit
def _gemm_tma_kernel(a_desc, a_scale_ptr, b_desc, b_scale_ptr, bias_ptr, c_ptr, M, N, K, stride_cm,
                     HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = _grouped_pid(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
    # TMA fills out-of-bounds rows and columns with zeros: no masks anywhere in the loop.
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([off_m, k * BLOCK_K])
        b = b_desc.load([off_n, k * BLOCK_K])
        acc = tl.dot(a, b.T, acc, out_dtype=tl.int32)
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    _epilogue(acc, offs_m, offs_n, M, N, a_scale_ptr, b_scale_ptr, bias_ptr, c_ptr, stride_cm, HAS_BIAS)


# --------------------------------------------------------------------------- fused, small M
@triton.jit
def _fused_small_m_kernel(x_ptr, w_ptr, w_scale_ptr, bias_ptr, c_ptr, M, N, K,
                          stride_xm, stride_wn, stride_cm,
                          EPS: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, AMAX_BLOCK: tl.constexpr,
                          EVEN_K: tl.constexpr, USE_RINT: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask = offs_m < M
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm

    # Per-token scales need the whole row's amax before any element is quantized. The rows are
    # few and short next to the weight this program streams, so every program reduces them itself
    # (from L2) instead of paying another launch.
    # (AMAX_BLOCK: wide chunks, so that a row takes one or two dependent loads, not K / BLOCK_K.)
    offs_a = tl.arange(0, AMAX_BLOCK)
    amax = tl.zeros([BLOCK_M], dtype=tl.float32)
    for k0 in range(0, K, AMAX_BLOCK):
        mask = m_mask[:, None] & (k0 + offs_a[None, :] < K)
        xt = tl.load(x_rows + k0 + offs_a[None, :], mask=mask, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.max(tl.abs(xt), axis=1))
    x_scale = tl.math.div_rn(tl.maximum(amax, EPS), 127.0)

    w_rows = w_ptr + (offs_n % N).to(tl.int64)[:, None] * stride_wn  # [BLOCK_N, 1]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        mask = m_mask[:, None] & (k0 + offs_k[None, :] < K)
        xt = tl.load(x_rows + k0 + offs_k[None, :], mask=mask, other=0.0).to(tl.float32)
        xq = _quantize(xt, x_scale[:, None], USE_RINT)  # [BLOCK_M, BLOCK_K]
        if EVEN_K:
            w = tl.load(w_rows + k0 + offs_k[None, :])
        else:
            w = tl.load(w_rows + k0 + offs_k[None, :], mask=k0 + offs_k[None, :] < K, other=0)
        if BLOCK_M == 1:
            # [1, BLOCK_K] x [BLOCK_N, BLOCK_K] -> [BLOCK_N]: exact in int32.
            acc += tl.sum(xq.to(tl.int32) * w.to(tl.int32), axis=1)[None, :]
        else:
            acc = tl.dot(xq, tl.trans(w), acc, out_dtype=tl.int32)

    n_mask = offs_n < N
    w_s = tl.load(w_scale_ptr + offs_n, mask=n_mask, other=0.0)
    y = acc.to(tl.float32) * x_scale[:, None] * w_s[None, :]
    if HAS_BIAS:
        y = y + tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, y.to(c_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


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
    if weight_q.shape[1] != K:
        raise ValueError(f"weight_q has K={weight_q.shape[1]} but the activation has K={K}")
    if not weight_q.is_contiguous():
        raise ValueError(f"weight_q must be contiguous [N, K], got strides {weight_q.stride()}")
    N = weight_q.shape[0]
    if weight_scale.shape != (N,) or weight_scale.dtype != torch.float32 or not weight_scale.is_contiguous():
        raise ValueError(f"weight_scale must be a contiguous float32 [N={N}] tensor, got "
                         f"{weight_scale.dtype} {tuple(weight_scale.shape)}")
    for t, name in ((weight_q, "weight_q"), (weight_scale, "weight_scale")):
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but the activation is on {device}")
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
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def _tma_ok(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Host TMA descriptors need sm_90, 16-byte aligned bases and 16-byte aligned row strides."""
    if a.device.type == "cuda":
        if _capability(a.device.index if a.device.index is not None else torch.cuda.current_device()) < (9, 0):
            return False
    elif not _INTERPRET:
        return False
    return all(t.data_ptr() % 16 == 0 and t.stride(0) % 16 == 0 for t in (a, b))


# --------------------------------------------------------------------------- configs
_FUSED_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
_TWO_PASS_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages", "tma")


def _fused(bm, bn, bk, warps, stages) -> dict:
    return {"kernel": "fused", "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps,
            "num_stages": stages}


def _two_pass(bm, bn, bk, warps, stages, group_m=8, tma=False) -> dict:
    return {"kernel": "two_pass", "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m,
            "num_warps": warps, "num_stages": stages, "tma": tma}


def _check_config(config: dict) -> None:
    kind = config.get("kernel")
    keys = {"fused": _FUSED_KEYS, "two_pass": _TWO_PASS_KEYS}.get(kind)
    if keys is None:
        raise ValueError(f"int8_dynamic config: 'kernel' must be 'fused' or 'two_pass', got {config!r}")
    missing = [k for k in keys if k not in config]
    if missing:
        raise ValueError(f"int8_dynamic config {config!r} lacks {missing}")
    if kind == "fused" and config["BLOCK_M"] not in (1, 16):
        raise ValueError(f"int8_dynamic fused config: BLOCK_M must be 1 (GEMV) or 16 (tl.dot), got {config!r}")
    if kind == "two_pass" and config["BLOCK_M"] < 16:
        raise ValueError(f"int8_dynamic two_pass config: BLOCK_M must be >= 16 (tl.dot), got {config!r}")


def _default_gemm_config(M: int, N: int, K: int) -> dict:
    if M <= 16:
        # Decode: stream the weight with many small-N programs (N / 16 >= 256 for N = 4096).
        return _two_pass(16, 16 if N <= 8192 else 32, 256, 4, 4)
    if M <= 64:
        return _two_pass(64, 32 if N <= 8192 else 64, 128, 4, 4)
    if M <= 256:
        return _two_pass(64, 64 if N * M <= 128 * 8192 else 128, 128, 4, 4)
    return _two_pass(128, 256, 128, 8, 3)


def default_config(M: int, N: int, K: int) -> dict:
    """A heuristic config valid for every problem (the fallback when no tuned entry exists)."""
    if M == 1:
        return _fused(1, 16, 1024, 4, 1)
    return _default_gemm_config(M, N, K)


def candidate_configs(M: int, N: int, K: int) -> list[dict]:
    """The search space of the offline sweep for an [M, K] x [N, K]^T problem (<= 8 configs; 24
    distinct over the 15 benchmark cells)."""
    decode = [_two_pass(16, 16, 256, 4, 4), _two_pass(16, 32, 256, 4, 4), _two_pass(16, 16, 512, 4, 3)]
    if M <= 1:
        # GEMV: the bytes in flight per SM come from BLOCK_N x BLOCK_K per program and N / BLOCK_N
        # programs; the two-pass path gets them from cp.async pipelining instead.
        return [_fused(1, 16, 1024, 4, 1), _fused(1, 16, 2048, 8, 1), _fused(1, 8, 2048, 4, 1),
                _fused(1, 32, 1024, 8, 1), _fused(1, 16, 512, 4, 3), *decode]
    if M <= 16:
        return [*decode, _two_pass(16, 64, 256, 4, 4), _fused(16, 32, 256, 4, 3), _fused(16, 16, 256, 4, 3)]
    if M <= 256:
        return [_two_pass(64, 64, 128, 4, 4), _two_pass(64, 128, 128, 4, 4), _two_pass(128, 64, 128, 4, 4),
                _two_pass(128, 128, 128, 8, 4), _two_pass(64, 64, 256, 4, 3),
                _two_pass(64, 64, 128, 4, 4, tma=True), _two_pass(128, 128, 128, 8, 4, tma=True)]
    return [_two_pass(128, 256, 128, 8, 3), _two_pass(128, 256, 128, 8, 3, tma=True),
            _two_pass(128, 128, 128, 8, 4), _two_pass(128, 128, 128, 8, 4, tma=True),
            _two_pass(256, 128, 128, 8, 3), _two_pass(256, 128, 128, 8, 3, tma=True),
            _two_pass(128, 256, 64, 8, 4), _two_pass(128, 128, 128, 4, 4, tma=True)]


def make_bench_inputs(N: int, K: int, dtype: torch.dtype = torch.bfloat16) -> tuple:
    """(weight_q, weight_scale, bias) on CUDA for the sweep: weights ~ N(0, 0.02²), no bias (as bf16's
    F.linear baseline in PERFORMANCE.md)."""
    w = torch.randn(N, K, device="cuda", dtype=dtype) * 0.02
    weight_q, weight_scale = quantize_weight(w)
    return weight_q, weight_scale, None


# --------------------------------------------------------------------------- launchers
def _quant_rows_launch(t: torch.Tensor, block_k: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    R, K = t.shape
    q = torch.empty((R, K), dtype=torch.int8, device=t.device)
    s = torch.empty((R,), dtype=torch.float32, device=t.device)
    if K == 0:
        raise ValueError("cannot quantize rows of length 0 (K = 0)")
    if R == 0:
        return q, s
    if block_k is None:
        block_k = triton.next_power_of_2(K) if K <= _SINGLE_PASS_MAX_K else 8192
    single = block_k >= K
    # ~8K elements per program: whole short rows in one program, several of them when K is small.
    block_r = max(1, min(8192 // block_k, triton.next_power_of_2(R)))
    warps = max(1, min(16, block_r * block_k // 1024))
    _quant_rows_kernel[(triton.cdiv(R, block_r),)](
        t, q, s, R, _loop_bound(K), t.stride(0), q.stride(0), EPS=AMAX_EPS, BLOCK_R=block_r, BLOCK_K=block_k,
        SINGLE_PASS=single, USE_RINT=not _INTERPRET, num_warps=warps)
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


def _gemm_launch(x_q, x_scale, weight_q, weight_scale, bias, out, config: dict) -> torch.Tensor:
    M, K = x_q.shape
    N = weight_q.shape[0]
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    bias_arg = bias if bias is not None else weight_scale  # never read when HAS_BIAS is False
    common = dict(HAS_BIAS=bias is not None, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=config["GROUP_M"],
                  num_warps=config["num_warps"], num_stages=config["num_stages"], enable_fp_fusion=False)
    if config["tma"] and _tma_ok(x_q, weight_q):
        from triton.tools.tensor_descriptor import TensorDescriptor

        a_desc = TensorDescriptor(x_q, [M, K], [x_q.stride(0), 1], [bm, bk])
        b_desc = TensorDescriptor(weight_q, [N, K], [K, 1], [bn, bk])
        _gemm_tma_kernel[grid](a_desc, x_scale, b_desc, weight_scale, bias_arg, out, M, N, _loop_bound(K),
                               out.stride(0), **common)
    else:
        _gemm_kernel[grid](x_q, x_scale, weight_q, weight_scale, bias_arg, out, M, N, _loop_bound(K),
                           x_q.stride(0), K, out.stride(0), EVEN_K=K % bk == 0, **common)
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
    out = torch.empty((M, N), dtype=out_dtype, device=x_q.device)
    if M == 0 or N == 0:
        return out
    if config is None or config.get("kernel") != "two_pass":
        config = _default_gemm_config(M, N, K)
    _check_config(config)
    return _gemm_launch(x_q, x_scale, weight_q, weight_scale, bias, out, config)


def _bench_fn(x, weight_q, weight_scale, bias):
    def bench(config: dict) -> float:
        import triton.testing

        fn = lambda: linear(x, weight_q, weight_scale, bias, config=config)  # noqa: E731
        fn()
        return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")

    return bench


def linear(x: torch.Tensor, weight_q: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None = None,
           *, config: dict | None = None) -> torch.Tensor:
    """The whole Int8DynamicLinear forward on ``x`` [M, K]: per-token quantization + scaled int8 GEMM."""
    _check_rows(x, "x", _FLOAT_DTYPES)
    M, K = x.shape
    _check_k(K)
    N = _check_weight(weight_q, weight_scale, K, x.device)
    _check_bias(bias, N, x.device)
    if M == 0 or N == 0:
        return torch.empty((M, N), dtype=x.dtype, device=x.device)
    if config is None:
        if x.device.type == "cuda":
            from quantkit.kernels.tuning import get_config

            config = get_config(FAMILY, M, N, K, module=sys.modules[__name__],
                                bench=_bench_fn(x, weight_q, weight_scale, bias))
        else:
            config = default_config(M, N, K)
    _check_config(config)
    if config["kernel"] == "two_pass":
        x_q, x_scale = _quant_rows_launch(x)
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
        return _gemm_launch(x_q, x_scale, weight_q, weight_scale, bias, out, config)

    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    grid = (triton.cdiv(N, bn), triton.cdiv(M, bm))
    # 8K elements per amax load at most (64 float32 registers a thread with 4 warps).
    amax_block = max(bk, min(triton.next_power_of_2(K), 8192 // bm))
    _fused_small_m_kernel[grid](
        x, weight_q, weight_scale, bias if bias is not None else weight_scale, out, M, N, _loop_bound(K),
        x.stride(0), K, out.stride(0), EPS=AMAX_EPS, HAS_BIAS=bias is not None, BLOCK_M=bm, BLOCK_N=bn,
        BLOCK_K=bk, AMAX_BLOCK=amax_block, EVEN_K=K % bk == 0, USE_RINT=not _INTERPRET, num_warps=config["num_warps"],
        num_stages=config["num_stages"], enable_fp_fusion=False)
    return out
