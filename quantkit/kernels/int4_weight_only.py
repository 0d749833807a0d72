"""int4 weight-only (A16W4) Triton kernels: ``y = x @ dequant(W)^T (+ bias)`` with 4-bit group-wise weights.

Numerics (those of :func:`quantkit.reference.int4.int4_weight_only_linear`)::

    W[n, k] = (q[n, k] - z[n, k // g]) * s[n, k // g]        q, z in 0..15, s any float dtype
    y[m, n] = sum_k x[m, k] * W[n, k]  (+ bias[n])            float32 accumulation, cast to x.dtype

Layout (documented in :mod:`quantkit.reference.int4`): ``weight_packed`` uint8 [N, K/2], read here as
little-endian int32 words [N, K/8]: word w of row n holds q[n, 8w + i] in bits 4i..4i+3.
``weight_scale`` [N, K/g] (bf16, fp16 or fp32), ``weight_zero_point`` uint8 [N, K/g], all contiguous;
``bias`` [N] in any float dtype; ``x`` [M, K] with unit stride along K (any row stride); output [M, N].

Kernels (the reasoning, per-cell byte counts and predicted times are in notes/int4_weight_only.md)
  * ``_small_kernel`` (decode, M <= 16; config ``{"kernel": "small"}``): one launch, no workspace.
    Tensor cores with the weight as the LEFT operand: Y^T tile [BLOCK_N, BLOCK_M] = W tile · X^T
    tile, with BLOCK_M = M rounded up to a power of two (Triton pads the mma's n8 itself, so M = 1
    wastes no shared memory). Each iteration takes CHUNKS consecutive K chunks of DK = min(g, 128)
    columns as the batch of a 3-D dot; the warps split the batch, i.e. the K range, so a program of
    16-64 rows still has 4-8 warps and 8-64 KB of weight in flight (cp.async, num_stages), and
    N / BLOCK_N programs stream the weight once. Per chunk the dot takes the *exact* integers q - z
    and its float32 result is multiplied by the scale (``acc += dot * s``): float32-exact up to
    summation order. The batch is summed across warps once at the end. Dequantization: inline PTX
    per int32 word, 3 SHR + 4 LOP3 + 4 packed FMA for 8 weights: ``(w >> 4j) & 0x000F000F | magic``
    is the 16-bit float pair (magic + q_j, magic + q_{j+4}) and ``fma(t, 1, -(magic + z))`` makes it
    (q_j - z, q_{j+4} - z) exactly; the pairing (j, j + 4) becomes k order by permuting K the same way
    in the activation tile (inside each 8-column word: logical 2j + e <-> physical j + 4e).
  * ``_gemv_kernel`` (M = 1 alternative, ``{"kernel": "gemv"}``): CUDA cores, float32 throughout.
    A nibble becomes a float with one LOP3: ``(word & (0xF << p)) | 0x4B000000`` is 2^23 + q·2^p
    exactly; ``- 2^23`` gives q·2^p and 2^-p goes into the activation. Per group
    ``s * (sum q*x - z * sum x)``. Grid (N / BLOCK_N, M).
  * ``_mma_kernel`` (M > 16 where the Gluon kernel below cannot run, ``{"kernel": "mma"}``):
    acc[BM, BN] += x tile · W tile^T with the weight dequantized in the K loop (PTX: PRMT + LOP3 +
    packed FMA, codes in natural order).
    ``SCALE_IN`` multiplies by the scale there as well (one rounding of (q - z)·s to the activation
    dtype, as a bf16 weight would be); without it the dot takes q - z and the float32 partial
    product of the tile is scaled (BLOCK_K <= g). Grouped launch order, software-pipelined loads.
    With ``SPLIT_K`` > 1 the K range is split across programs that write float32 partials to a
    workspace [SPLIT_K, M, N] summed by ``_splitk_reduce_kernel`` (fixed order, adds the bias, casts).
  * The Gluon kernel of :mod:`quantkit.kernels.wo_gemm_sm90` (M > 16 on sm_90, ``{"kernel":
    "tma_wgmma"}``, the default past M = 16 but on narrow layers to M = 64 and the largest problems; with
    few output tiles, split-K by its stream-K pieces): TMA ring of x tiles and packed weight tiles,
    each packed byte converted in registers to ((q0 - z)·s, (q1 - z)·s) rounded once to x.dtype (the
    numerics of ``SCALE_IN`` and ``dequant_mm``) straight into wgmma's register A operand, Y^T tiles.
    Needs bf16/fp16 x with scales of the same dtype and K % 32 == 0; a K step holds whole groups (groups of
    16-32 take two or more a step, each with its own zero-point and scale) or is a part of one;
    elsewhere ``_mma_kernel`` (M < 512) or ``dequant_mm`` runs instead.
  * ``_dequant_kernel`` + cuBLAS (large M, ``{"kernel": "dequant_mm"}``, the default from M = 4096 where
    M·N·K >= 2^36, and where the Gluon kernel cannot run from M = 512):
    the weight is dequantized into a temporary [N, K] tensor of x.dtype ((q - z)·s rounded once, as
    ``SCALE_IN``) and ``F.linear`` runs the GEMM. Where the GEMM is compute-bound this costs the
    N·K/2 + 2·N·K bytes of one pass (~14 µs at 4096x4096 on an H100) and gets cuBLAS' tensor-core
    rate, which beats dequantizing in the K loop of ``_mma_kernel`` (0.53-0.61x of bf16 at M >= 1024).
  Float32 activations (and the interpreter) take the same paths in float32 arithmetic with
  ``input_precision="ieee"``.

Allocations per call: the output only (one block). ``mma`` configs with SPLIT_K > 1 (M > 16 only)
keep their float32 partials behind the output in that block
(:func:`quantkit.kernels.workspace.out_with_workspace`), so they live as long as the output does. The
exception is ``dequant_mm``: its [N, K] weight is a second allocation (in the output's block it would
stay alive, N·K·2 bytes, as long as every output), used only where the GPU time is hundreds of
microseconds. Both come from PyTorch's caching allocator (inside CUDA-graph capture, the graph's pool).
Every launch goes through :func:`quantkit.kernels.launch.cached`.

Limits: group_size a power of two >= 16 (the recipes use 32, 64, 128, 256) and K % group_size == 0;
M and N arbitrary. ``linear`` picks a config per problem (``quantkit.kernels.tuning``: tuned table,
else ``default_config``); a ``gemv`` config is honoured for M = 1 only (other M run the default).
"""
from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from quantkit.kernels.configs import check_keys, key_sets
from quantkit.kernels.launch import cached
from quantkit.kernels.tiling import grouped_pid
from quantkit.kernels.workspace import out_with_workspace
from quantkit.reference.common import ceil_div

MIN_CAPABILITY = (8, 0)
FAMILY = "int4_weight_only"

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_SMALL_MAX_M = 16
# float32 2^23 has an all-zero mantissa: OR-ing a nibble into bits 0..22 gives 2^23 + value exactly.
_MAGIC = 0x4B000000
_MAGIC_F = tl.constexpr(8388608.0)
_MAGIC_C = tl.constexpr(_MAGIC)

# dequantization modes
_MODE_F32 = 0  # float32 arithmetic (float32 activations, the interpreter, or ASM disabled)
_MODE_BF16 = 1
_MODE_F16 = 2


def _asm_consts(fp16: bool) -> tuple[str, str, str]:
    """(magic pair, 1.0 pair, packed FMA) of the 16-bit float type: ``magic | q`` is the float
    magic + q (128 for bf16, 1024 for fp16: both have a unit last mantissa bit)."""
    return ("0x64006400", "0x3C003C00", "fma.rn.f16x2") if fp16 else ("0x43004300", "0x3F803F80", "fma.rn.bf16x2")


def _asm_pairs(fp16: bool) -> str:
    """PTX for ``tl.inline_asm_elementwise(pack=2)`` over ``join(words, words)`` (small kernel):
    output j receives codes j and j + 4 of the word (bits 4j.. and 4j + 16..) minus the zero-point,
    exactly. Operands: $0..$3 the four outputs (16-bit pairs), $4 (= $5) the word, $6 the pair
    (-(magic + z), -(magic + z)) precomputed outside (it is per row, not per word)."""
    magic, one, fma = _asm_consts(fp16)
    lines = ["{", ".reg .b32 t, u, one;", f"mov.b32 one, {one};"]
    for j in range(4):
        src = "$4"
        if j:
            lines.append(f"shr.b32 u, $4, {4 * j};")
            src = "u"
        lines.append(f"lop3.b32 t, {src}, 0x000F000F, {magic}, 0xEA;")  # (src & mask) | magic
        lines.append(f"{fma} ${j}, t, one, $6;")
    lines.append("}")
    return "\n".join(lines)


def _asm_dequant(fp16: bool, scale: bool) -> str:
    """PTX for ``tl.inline_asm_elementwise(pack=2)`` over ``join(words, words)`` (tile and dequant
    kernels, natural code order): output j receives codes 2j and 2j+1 of the word (byte j's low and
    high nibble), minus the zero-point, times the scale if ``scale``.

    Operands: $0..$3 the four outputs (16-bit pairs), $4 (= $5) the word, $6 the pair
    (magic + z, magic + z), $7 the scale pair. ``(magic | q) - (magic + z)`` is exactly q - z; the
    scale multiply (an FMA with -0.0) rounds once."""
    magic, one, fma = _asm_consts(fp16)
    lines = ["{", ".reg .b32 t, u, one, nz, mz;", f"mov.b32 one, {one};", "mov.b32 mz, 0x80008000;",
             "xor.b32 nz, $6, 0x80008000;", "shr.b32 u, $4, 4;"]
    for j in range(4):
        # byte 0 <- byte j of the word (low nibble = code 2j); byte 2 <- byte j of word >> 4 (code 2j+1)
        lines.append(f"prmt.b32 t, $4, u, 0x{4 + j}{4 + j}{j}{j};")
        lines.append(f"lop3.b32 t, t, 0x000F000F, {magic}, 0xEA;")
        if scale:
            lines.append(f"{fma} t, t, one, nz;")
            lines.append(f"{fma} ${j}, t, $7, mz;")
        else:
            lines.append(f"{fma} ${j}, t, one, nz;")
    lines.append("}")
    return "\n".join(lines)


_ASMP_BF16 = tl.constexpr(_asm_pairs(False))
_ASMP_F16 = tl.constexpr(_asm_pairs(True))
_ASM_BF16_SUB = tl.constexpr(_asm_dequant(False, False))
_ASM_BF16_SCALE = tl.constexpr(_asm_dequant(False, True))
_ASM_F16_SUB = tl.constexpr(_asm_dequant(True, False))
_ASM_F16_SCALE = tl.constexpr(_asm_dequant(True, True))
# s and z rows are a few sectors each, re-read once per K chunk: bring them to L1 at the start so the
# in-loop loads (which cannot join the cp.async pipeline: 1-2 bytes per thread) do not wait on DRAM.
_ASM_PREFETCH = tl.constexpr("prefetch.global.L1 [$1];\nmov.u32 $0, 0;")


def _loop_bound(n: int):
    """A trip count as the kernels receive it. Under the interpreter (triton 3.6, numpy >= 2.4) a
    runtime integer argument is a 1-element array that ``range()`` cannot take, so it goes in as a
    constexpr there; compiled kernels get a plain int (no recompilation per value)."""
    return tl.constexpr(n) if _INTERPRET else n


# --------------------------------------------------------------------------- device code: small M
@triton.jit
def _prefetch_rows(base_ptr, rows, row_len, PREFETCH: tl.constexpr):
    """Prefetch ``row_len`` elements from ``base_ptr + row * row_len`` for each row into L1: one
    prefetch per 128 bytes and one at the row's last element (a row may end in one more line)."""
    if PREFETCH:
        STEP: tl.constexpr = 1024 // base_ptr.dtype.element_ty.primitive_bitwidth
        row_ptrs = base_ptr + rows * row_len
        for off in range(0, row_len, STEP):
            tl.inline_asm_elementwise(_ASM_PREFETCH, "=r,l", [row_ptrs + off], dtype=tl.int32, is_pure=False,
                                      pack=1)
        tl.inline_asm_elementwise(_ASM_PREFETCH, "=r,l", [row_ptrs + (row_len - 1)], dtype=tl.int32, is_pure=False,
                                  pack=1)


@triton.jit
def _small_kernel(x_ptr, w_ptr, s_ptr, z_ptr, b_ptr, y_ptr,
                  M, N, KW, G, stride_xm, TILES,
                  R: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DK: tl.constexpr,
                  CHUNKS: tl.constexpr, MODE: tl.constexpr, HAS_BIAS: tl.constexpr, PREFETCH: tl.constexpr):
    """Y^T[n, m] for a BLOCK_N x BLOCK_M tile; iteration t covers the K chunks c = t*CHUNKS + b
    (b < CHUNKS) of DK columns, chunk c in group c // R."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    DKW: tl.constexpr = DK // 8
    w_ptr = w_ptr.to(tl.pointer_type(tl.int32))  # the uint8 [N, K/2] buffer read as words [N, K/8]
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_b = tl.arange(0, CHUNKS)
    rows = offs_n % N  # in-bounds loads everywhere; the store is masked
    m_ok = offs_m < M
    x_ptrs = (x_ptr + offs_m.to(tl.int64)[None, None, :] * stride_xm + (offs_b * DK)[:, None, None]
              + tl.arange(0, DK)[None, :, None])  # [CHUNKS, DK, BLOCK_M]
    w_ptrs = (w_ptr + rows.to(tl.int64)[None, :, None] * KW + (offs_b * DKW)[:, None, None]
              + tl.arange(0, DKW)[None, None, :])  # [CHUNKS, BLOCK_N, DKW]
    # group of chunk t*CHUNKS + b = (t*CHUNKS) // R + b // R (R and CHUNKS are powers of two); the
    # loop-invariant part as a tensor lets Triton load s and z straight into the layouts that use them.
    # (Two index tensors built differently, so that they are not merged into one that both loads share.)
    z_off = rows[None, :] * G + (offs_b // R)[:, None]  # [CHUNKS, BLOCK_N]
    s_off = (rows * G)[None, :] + (offs_b // R)[:, None]
    _prefetch_rows(s_ptr, rows, G, PREFETCH)
    _prefetch_rows(z_ptr, rows, G, PREFETCH)

    acc = tl.zeros([CHUNKS, BLOCK_N, BLOCK_M], dtype=tl.float32)
    for t in range(0, TILES):
        words = tl.load(w_ptrs + t * (CHUNKS * DKW), eviction_policy="evict_first")  # read once
        if R == 1:
            g_t = t * CHUNKS  # known multiple of CHUNKS: s and z load as CHUNKS-wide vectors (cp.async)
        else:
            g_t = (t * CHUNKS) // R
        z = tl.load(z_ptr + z_off + g_t).to(tl.int32)  # [CHUNKS, BLOCK_N]
        s = tl.load(s_ptr + s_off + g_t).to(tl.float32)
        # o_j[b, n, w, e] = code j + 4e of word w minus z, exactly
        if MODE == 0:
            w2 = tl.join(words, words)
            e16 = (tl.arange(0, 2) * 16)[None, None, None, :]
            zf = z.to(tl.float32)[:, :, None, None]
            o0 = ((w2 >> e16) & 0xF).to(tl.float32) - zf
            o1 = ((w2 >> (e16 + 4)) & 0xF).to(tl.float32) - zf
            o2 = ((w2 >> (e16 + 8)) & 0xF).to(tl.float32) - zf
            o3 = ((w2 >> (e16 + 12)) & 0xF).to(tl.float32) - zf
        elif MODE == 1:
            nz = (z | 0xC300).to(tl.int16).to(tl.bfloat16, bitcast=True)[:, :, None, None]  # -(128 + z)
            o0, o1, o2, o3 = tl.inline_asm_elementwise(
                _ASMP_BF16, "=r,=r,=r,=r,r,r,r", [tl.join(words, words), nz],
                dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True, pack=2)
        else:
            nz = (z | 0xE400).to(tl.int16).to(tl.float16, bitcast=True)[:, :, None, None]  # -(1024 + z)
            o0, o1, o2, o3 = tl.inline_asm_elementwise(
                _ASMP_F16, "=r,=r,=r,=r,r,r,r", [tl.join(words, words), nz],
                dtype=(tl.float16, tl.float16, tl.float16, tl.float16), is_pure=True, pack=2)
        q = tl.join(tl.join(o0, o1), tl.join(o2, o3))  # [.., w, e, b2, a2]: code 2*a2 + b2 + 4e
        # logical column 8w + 2j + e holds code j + 4e (j = 2*a2 + b2)
        wt = tl.reshape(tl.permute(q, (0, 1, 2, 5, 4, 3)), (CHUNKS, BLOCK_N, DK))
        xt = tl.load(x_ptrs + t * (CHUNKS * DK), mask=m_ok[None, None, :], other=0.0)
        # the same permutation of K inside each 8-column word: logical 2j + e <- physical j + 4e
        xt = tl.reshape(tl.permute(tl.reshape(xt, (CHUNKS, DKW, 2, 4, BLOCK_M)), (0, 1, 3, 2, 4)),
                        (CHUNKS, DK, BLOCK_M))
        if MODE == 0:
            part = tl.dot(wt, xt.to(tl.float32), input_precision="ieee")
        else:
            part = tl.dot(wt, xt)
        acc += part * s[:, :, None]

    y = tl.sum(acc, axis=0)
    if HAS_BIAS:
        y += tl.load(b_ptr + rows).to(tl.float32)[:, None]
    ptrs = y_ptr + offs_m.to(tl.int64)[None, :] * N + offs_n[:, None]
    tl.store(ptrs, y.to(y_ptr.dtype.element_ty), mask=(offs_n < N)[:, None] & m_ok[None, :])


# --------------------------------------------------------------------------- device code: GEMV (M = 1)
@triton.jit
def _nib_f32(v, MASK: tl.constexpr, magic):
    # (v & MASK) sits in bits 0..22: 2^23 + that, minus 2^23, exactly. ``magic`` is a runtime value so
    # that the AND and the OR fuse into one LOP3 (two immediates would not).
    return ((v & MASK) | magic).to(tl.float32, bitcast=True) - _MAGIC_F


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, s_ptr, z_ptr, b_ptr, y_ptr,
                 N, KW, G, stride_xm, TILES, magic,
                 GROUP: tl.constexpr, BLOCK_N: tl.constexpr, GROUPS_PER_TILE: tl.constexpr,
                 EVEN_G: tl.constexpr, HAS_BIAS: tl.constexpr, NUM_STAGES: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    WPG: tl.constexpr = GROUP // 8  # int32 words per group
    BKW: tl.constexpr = GROUPS_PER_TILE * WPG
    w_ptr = w_ptr.to(tl.pointer_type(tl.int32))

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = offs_n % N
    offs_w = tl.arange(0, BKW)
    offs_i = tl.arange(0, 8)
    offs_g = tl.arange(0, GROUPS_PER_TILE)
    # Nibble i is read at bit position p_i (0, 4, .., 16 in place; 8, 12, 16 after ``word >> 12``),
    # so it comes out as q·2^p_i; the activation takes the exact 2^-p_i instead.
    pos = tl.where(offs_i < 5, 4 * offs_i, 4 * offs_i - 12)
    x_unscale = ((127 - pos) << 23).to(tl.float32, bitcast=True)
    x_row = x_ptr + pid_m.to(tl.int64) * stride_xm
    w_rows = w_ptr + rows[:, None] * KW
    sz_rows = rows[:, None] * G

    acc = tl.zeros([BLOCK_N, GROUPS_PER_TILE], dtype=tl.float32)
    # tl.range's num_stages makes Triton prefetch these loads (cp.async) as it does for tl.dot loops.
    for it in tl.range(0, TILES, num_stages=NUM_STAGES):
        g0 = it * GROUPS_PER_TILE
        word = g0 * WPG + offs_w  # [BKW] word index in the row
        x_idx = word[:, None] * 8 + offs_i[None, :]  # [BKW, 8]
        grp = g0 + offs_g
        if EVEN_G:
            wd = tl.load(w_rows + word[None, :], eviction_policy="evict_first")
            x8 = tl.load(x_row + x_idx).to(tl.float32)
            s = tl.load(s_ptr + sz_rows + grp[None, :]).to(tl.float32)
            z = tl.load(z_ptr + sz_rows + grp[None, :]).to(tl.float32)
        else:
            w_ok = word < KW
            g_ok = grp < G
            wd = tl.load(w_rows + word[None, :], mask=w_ok[None, :], other=0, eviction_policy="evict_first")
            x8 = tl.load(x_row + x_idx, mask=w_ok[:, None], other=0.0).to(tl.float32)
            s = tl.load(s_ptr + sz_rows + grp[None, :], mask=g_ok[None, :], other=0.0).to(tl.float32)
            z = tl.load(z_ptr + sz_rows + grp[None, :], mask=g_ok[None, :], other=0).to(tl.float32)
        sx = tl.sum(tl.reshape(x8, (GROUPS_PER_TILE, WPG * 8)), axis=1)
        xs = x8 * x_unscale[None, :]
        # xs[:, i] as eight [BKW] vectors (splits of in-thread dimensions cost nothing)
        xa, xb = tl.split(tl.reshape(xs, (BKW, 4, 2)))  # i even / i odd
        xa0, xa1 = tl.split(tl.reshape(xa, (BKW, 2, 2)))  # {0, 4} / {2, 6}
        xb0, xb1 = tl.split(tl.reshape(xb, (BKW, 2, 2)))  # {1, 5} / {3, 7}
        x0, x4 = tl.split(xa0)
        x2, x6 = tl.split(xa1)
        x1, x5 = tl.split(xb0)
        x3, x7 = tl.split(xb1)
        wh = wd >> 12
        p = _nib_f32(wd, 0xF, magic) * x0[None, :]
        p += _nib_f32(wd, 0xF0, magic) * x1[None, :]
        p += _nib_f32(wd, 0xF00, magic) * x2[None, :]
        p += _nib_f32(wd, 0xF000, magic) * x3[None, :]
        p += _nib_f32(wd, 0xF0000, magic) * x4[None, :]
        p += _nib_f32(wh, 0xF00, magic) * x5[None, :]
        p += _nib_f32(wh, 0xF000, magic) * x6[None, :]
        p += _nib_f32(wh, 0xF0000, magic) * x7[None, :]
        qx = tl.sum(tl.reshape(p, (BLOCK_N, GROUPS_PER_TILE, WPG)), axis=2)
        acc += s * (qx - z * sx[None, :])

    y = tl.sum(acc, axis=1)
    if HAS_BIAS:
        y += tl.load(b_ptr + rows).to(tl.float32)
    tl.store(y_ptr + pid_m.to(tl.int64) * N + offs_n, y.to(y_ptr.dtype.element_ty), mask=offs_n < N)


# --------------------------------------------------------------------------- device code: tiles (M > 16)
@triton.jit
def _dequant_pairs(words, z, s, MODE: tl.constexpr, SCALE_IN: tl.constexpr):
    """words [BN, BKW] int32, z [BN] uint8, s [BN] float -> o0..o3 [BN, BKW, 2] with
    o_j[n, w, e] = (code 2j+e of word w) - z[n], times s[n] if SCALE_IN; float32 for MODE 0, else
    bf16 / fp16 (PTX above)."""
    w2 = tl.join(words, words)
    if MODE == 0:
        zf = (z.to(tl.int32) | _MAGIC_C).to(tl.float32, bitcast=True)[:, None, None]  # 2^23 + z
        e4 = (tl.arange(0, 2) * 4)[None, None, :]
        o0 = (((w2 >> e4) & 0xF) | _MAGIC_C).to(tl.float32, bitcast=True) - zf
        o1 = (((w2 >> (e4 + 8)) & 0xF) | _MAGIC_C).to(tl.float32, bitcast=True) - zf
        o2 = (((w2 >> (e4 + 16)) & 0xF) | _MAGIC_C).to(tl.float32, bitcast=True) - zf
        o3 = (((w2 >> (e4 + 24)) & 0xF) | _MAGIC_C).to(tl.float32, bitcast=True) - zf
        if SCALE_IN:
            sf = s.to(tl.float32)[:, None, None]
            o0 = o0 * sf
            o1 = o1 * sf
            o2 = o2 * sf
            o3 = o3 * sf
    else:
        if MODE == 1:
            zh = (z.to(tl.int16) | 0x4300).to(tl.bfloat16, bitcast=True)[:, None, None]
            if SCALE_IN:
                o0, o1, o2, o3 = tl.inline_asm_elementwise(
                    _ASM_BF16_SCALE, "=r,=r,=r,=r,r,r,r,r", [w2, zh, s.to(tl.bfloat16)[:, None, None]],
                    dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True, pack=2)
            else:
                o0, o1, o2, o3 = tl.inline_asm_elementwise(
                    _ASM_BF16_SUB, "=r,=r,=r,=r,r,r,r", [w2, zh],
                    dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True, pack=2)
        else:
            zh = (z.to(tl.int16) | 0x6400).to(tl.float16, bitcast=True)[:, None, None]
            if SCALE_IN:
                o0, o1, o2, o3 = tl.inline_asm_elementwise(
                    _ASM_F16_SCALE, "=r,=r,=r,=r,r,r,r,r", [w2, zh, s.to(tl.float16)[:, None, None]],
                    dtype=(tl.float16, tl.float16, tl.float16, tl.float16), is_pure=True, pack=2)
            else:
                o0, o1, o2, o3 = tl.inline_asm_elementwise(
                    _ASM_F16_SUB, "=r,=r,=r,=r,r,r,r", [w2, zh],
                    dtype=(tl.float16, tl.float16, tl.float16, tl.float16), is_pure=True, pack=2)
    return o0, o1, o2, o3


@triton.jit
def _words_to_tile(o0, o1, o2, o3, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """o_j[n, w, e] (code 8w + 2j + e) -> [BLOCK_N, BLOCK_K] in k order (register relabelling)."""
    q = tl.join(tl.join(o0, o2), tl.join(o1, o3))  # [BN, BKW, e, a, b]: code 4a + 2b + e
    return tl.reshape(tl.permute(q, (0, 1, 3, 4, 2)), (BLOCK_N, BLOCK_K))


@triton.jit
def _mma_kernel(x_ptr, w_ptr, s_ptr, z_ptr, b_ptr, y_ptr, ws_ptr,
                M, N, KW, G, stride_xm, TILES,
                GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                GROUP_M: tl.constexpr, MODE: tl.constexpr, SCALE_IN: tl.constexpr, DOT_F32: tl.constexpr,
                EVEN_M: tl.constexpr, USE_WS: tl.constexpr, HAS_BIAS: tl.constexpr):
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m, pid_n = grouped_pid(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)

    BKW: tl.constexpr = BLOCK_K // 8
    w_ptr = w_ptr.to(tl.pointer_type(tl.int32))
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = offs_n % N
    m_ok = offs_m < M
    x_ptrs = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm + tl.arange(0, BLOCK_K)[None, :]
    w_ptrs = w_ptr + rows.to(tl.int64)[:, None] * KW + tl.arange(0, BKW)[None, :]
    s_ptrs = s_ptr + rows * G
    z_ptrs = z_ptr + rows * G

    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for it in range(0, TILES):
        t = pid_k * TILES + it
        words = tl.load(w_ptrs + t * BKW)  # [BLOCK_N, BKW]
        g = (t * BLOCK_K) // GROUP  # BLOCK_K <= GROUP: one group per row in this tile
        s = tl.load(s_ptrs + g)
        z = tl.load(z_ptrs + g)
        o0, o1, o2, o3 = _dequant_pairs(words, z, s, MODE, SCALE_IN)
        w = _words_to_tile(o0, o1, o2, o3, BLOCK_N, BLOCK_K)
        if EVEN_M:
            xt = tl.load(x_ptrs + t * BLOCK_K)
        else:
            xt = tl.load(x_ptrs + t * BLOCK_K, mask=m_ok[:, None], other=0.0)
        if DOT_F32:
            xt = xt.to(tl.float32)
            wt = tl.trans(w.to(tl.float32))
        else:
            wt = tl.trans(w.to(x_ptr.dtype.element_ty))
        if SCALE_IN:
            acc = tl.dot(xt, wt, acc, input_precision="ieee" if DOT_F32 else None)
        else:
            acc += tl.dot(xt, wt, input_precision="ieee" if DOT_F32 else None) * s.to(tl.float32)[None, :]

    mask = m_ok[:, None] & (offs_n < N)[None, :]
    if USE_WS:
        ptrs = ws_ptr + (pid_k * M + offs_m.to(tl.int64))[:, None] * N + offs_n[None, :]
        tl.store(ptrs, acc, mask=mask)
    else:
        if HAS_BIAS:
            acc += tl.load(b_ptr + rows).to(tl.float32)[None, :]
        ptrs = y_ptr + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.store(ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _splitk_reduce_kernel(ws_ptr, b_ptr, y_ptr, MN, N,
                          SPLIT_K: tl.constexpr, BLOCK: tl.constexpr, HAS_BIAS: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.load(ws_ptr + offs, mask=mask, other=0.0)
    for i in tl.static_range(1, SPLIT_K):
        acc += tl.load(ws_ptr + i * MN + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs % N, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=mask)


# --------------------------------------------------------------------------- device code: dequantize (large M)
@triton.jit
def _dequant_kernel(w_ptr, s_ptr, z_ptr, out_ptr, N, KW, G,
                    GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_KW: tl.constexpr, MODE: tl.constexpr,
                    ROUND_BF16: tl.constexpr):
    """out[n, k] = (q - z) * s rounded once to out's dtype; a [BLOCK_N, 8 * BLOCK_KW] tile per program."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    w_ptr = w_ptr.to(tl.pointer_type(tl.int32))
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    wk = pid_k * BLOCK_KW + tl.arange(0, BLOCK_KW)
    ok = (rows < N)[:, None] & (wk < KW)[None, :]
    rows64 = rows.to(tl.int64)[:, None]
    words = tl.load(w_ptr + rows64 * KW + wk[None, :], mask=ok, other=0, eviction_policy="evict_first")
    grp = (wk * 8) // GROUP  # a word never straddles two groups (GROUP >= 16)
    s = tl.load(s_ptr + rows64 * G + grp[None, :], mask=ok, other=0.0)
    z = tl.load(z_ptr + rows64 * G + grp[None, :], mask=ok, other=0)
    w2 = tl.join(words, words)
    if MODE == 0:
        zf = z.to(tl.float32)[:, :, None]
        sf = s.to(tl.float32)[:, :, None]
        e4 = (tl.arange(0, 2) * 4)[None, None, :]
        # (q - z) * s is exact in float32 (4-bit times a <= 24-bit significand): one rounding below
        o0 = (((w2 >> e4) & 0xF).to(tl.float32) - zf) * sf
        o1 = (((w2 >> (e4 + 8)) & 0xF).to(tl.float32) - zf) * sf
        o2 = (((w2 >> (e4 + 16)) & 0xF).to(tl.float32) - zf) * sf
        o3 = (((w2 >> (e4 + 24)) & 0xF).to(tl.float32) - zf) * sf
    elif MODE == 1:
        zh = (z.to(tl.int16) | 0x4300).to(tl.bfloat16, bitcast=True)[:, :, None]
        o0, o1, o2, o3 = tl.inline_asm_elementwise(
            _ASM_BF16_SCALE, "=r,=r,=r,=r,r,r,r,r", [w2, zh, s.to(tl.bfloat16)[:, :, None]],
            dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True, pack=2)
    else:
        zh = (z.to(tl.int16) | 0x6400).to(tl.float16, bitcast=True)[:, :, None]
        o0, o1, o2, o3 = tl.inline_asm_elementwise(
            _ASM_F16_SCALE, "=r,=r,=r,=r,r,r,r,r", [w2, zh, s.to(tl.float16)[:, :, None]],
            dtype=(tl.float16, tl.float16, tl.float16, tl.float16), is_pure=True, pack=2)
    tile = _words_to_tile(o0, o1, o2, o3, BLOCK_N, BLOCK_KW * 8)
    if ROUND_BF16:
        # float32 -> bf16 rounding to nearest even done on the bits (the interpreter truncates casts)
        b = tile.to(tl.int32, bitcast=True)
        b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        tile = b.to(tl.int16).to(tl.bfloat16, bitcast=True)
    cols = pid_k * (BLOCK_KW * 8) + tl.arange(0, BLOCK_KW * 8)
    ok8 = (rows < N)[:, None] & (cols < KW * 8)[None, :]
    tl.store(out_ptr + rows64 * (KW * 8) + cols[None, :], tile.to(out_ptr.dtype.element_ty), mask=ok8)


_small_fast = cached(_small_kernel)
_gemv_fast = cached(_gemv_kernel)
_mma_fast = cached(_mma_kernel)
_reduce_fast = cached(_splitk_reduce_kernel)
_dequant_fast = cached(_dequant_kernel)


# --------------------------------------------------------------------------- host side: checks
_GROUP_SIZES = frozenset(1 << i for i in range(4, 21))


def _check_inputs(x, weight_packed, weight_scale, weight_zero_point, bias, group_size) -> tuple[int, int, int]:
    """(M, N, K) after validating every argument. One combined test on the common path (this runs
    on every decode step); the detailed checks only run to say what is wrong."""
    try:
        M, K = x.shape
        N, G = weight_scale.shape
        dev = x.device
        ok = (x.dtype in _FLOAT_DTYPES and (K <= 1 or x.stride(1) == 1) and group_size in _GROUP_SIZES
              and K == G * group_size and weight_scale.dtype in _FLOAT_DTYPES and weight_scale.is_contiguous()
              and weight_packed.dtype == torch.uint8 and weight_packed.shape == (N, K // 2)
              and weight_packed.is_contiguous() and weight_packed.data_ptr() % 4 == 0
              and weight_zero_point.dtype == torch.uint8 and weight_zero_point.shape == (N, G)
              and weight_zero_point.is_contiguous()
              and weight_packed.device == dev and weight_scale.device == dev and weight_zero_point.device == dev
              and (dev.type == "cuda" or _INTERPRET)
              and (bias is None or (bias.shape == (N,) and bias.dtype in _FLOAT_DTYPES and bias.is_contiguous()
                                    and bias.device == dev)))
    except (ValueError, TypeError, AttributeError):
        ok = False
    if not ok:
        _explain_inputs(x, weight_packed, weight_scale, weight_zero_point, bias, group_size)
    return M, N, K


def _explain_inputs(x, weight_packed, weight_scale, weight_zero_point, bias, group_size) -> None:
    def device_ok(t, name):
        if t.device.type != "cuda" and not _INTERPRET:
            raise ValueError(f"int4_weight_only kernels need CUDA tensors (or TRITON_INTERPRET=1); {name} is on "
                             f"{t.device}")
        if t.device != x.device:
            raise ValueError(f"{name} is on {t.device} but the activation is on {x.device}")

    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K], got shape {tuple(x.shape)}")
    if x.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"x must be bfloat16, float16 or float32, got {x.dtype}")
    M, K = x.shape
    if K > 1 and x.stride(1) != 1:
        raise ValueError(f"x must be contiguous along its last dimension, got strides {x.stride()}")
    device_ok(x, "x")
    if group_size not in _GROUP_SIZES:
        raise ValueError(f"group_size must be a power of two >= 16, got {group_size!r}")
    if K % group_size:
        raise ValueError(f"K={K} is not a multiple of group_size={group_size}")
    if weight_scale.dim() != 2 or weight_scale.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"weight_scale must be a 2-D bf16/fp16/fp32 tensor [N, K/g], got {weight_scale.dtype} "
                         f"{tuple(weight_scale.shape)}")
    N, G = weight_scale.shape[0], K // group_size
    if tuple(weight_scale.shape) != (N, G) or not weight_scale.is_contiguous():
        raise ValueError(f"weight_scale must be contiguous [N={N}, K/g={G}], got {tuple(weight_scale.shape)} "
                         f"strides {weight_scale.stride()}")
    device_ok(weight_scale, "weight_scale")
    if weight_packed.dtype != torch.uint8 or tuple(weight_packed.shape) != (N, K // 2):
        raise ValueError(f"weight_packed must be uint8 [N={N}, K/2={K // 2}], got {weight_packed.dtype} "
                         f"{tuple(weight_packed.shape)}")
    if not weight_packed.is_contiguous():
        raise ValueError(f"weight_packed must be contiguous, got strides {weight_packed.stride()}")
    if weight_packed.data_ptr() % 4:
        raise ValueError("weight_packed must start on a 4-byte boundary (the kernels read it as int32 words)")
    device_ok(weight_packed, "weight_packed")
    if weight_zero_point.dtype != torch.uint8 or tuple(weight_zero_point.shape) != (N, G) \
            or not weight_zero_point.is_contiguous():
        raise ValueError(f"weight_zero_point must be contiguous uint8 [N={N}, K/g={G}], got "
                         f"{weight_zero_point.dtype} {tuple(weight_zero_point.shape)}")
    device_ok(weight_zero_point, "weight_zero_point")
    if bias is not None:
        if tuple(bias.shape) != (N,) or bias.dtype not in _FLOAT_DTYPES or not bias.is_contiguous():
            raise ValueError(f"bias must be a contiguous [N={N}] bf16/fp16/fp32 tensor, got {bias.dtype} "
                             f"{tuple(bias.shape)}")
        device_ok(bias, "bias")
    raise ValueError("int4_weight_only: invalid arguments")  # unreachable unless a check above is missing


# --------------------------------------------------------------------------- configs
_KEYS = {
    "small": ("BLOCK_N", "CHUNKS", "num_warps", "num_stages"),
    "gemv": ("BLOCK_N", "BLOCK_K", "num_warps", "num_stages"),
    "mma": ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "GROUP_M", "SCALE_IN", "num_warps", "num_stages"),
    "dequant_mm": ("BLOCK_N", "BLOCK_K", "num_warps"),
    "tma_wgmma": ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages"),
    "decode": ("MT", "WK", "WM", "DK"),
}
_OPTIONAL_KEYS = {"small": ("ASM",), "gemv": (), "mma": ("ASM",), "dequant_mm": ("ASM",),
                  "tma_wgmma": ("PERSISTENT", "STREAM_K"),
                  "decode": ("SUB", "XPF", "DIAG", "DG", "TILED", "L2PF", "MAXNREG", "SCALE_IN")}
_KINDS = key_sets(_KEYS, _OPTIONAL_KEYS)
_POW2_KEYS = {"small": ("BLOCK_N", "CHUNKS", "num_warps"), "gemv": ("BLOCK_N", "BLOCK_K"),
              "mma": ("BLOCK_M", "BLOCK_N", "BLOCK_K"), "dequant_mm": ("BLOCK_N", "BLOCK_K"),
              "tma_wgmma": ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"), "decode": ("MT", "WK", "WM", "DK")}
_TARGET_PROGRAMS = 256  # about two per SM on an H100 (132 SMs): enough to hide a tail
_DEQUANT_MM_MIN_M = 512  # where the Gluon kernel cannot run: from here dequant_mm, not the mma kernel
_DEQUANT_MM_MIN_M_LARGE = 4096  # default_config: dequant_mm from here, for problems of at least _DEQUANT_MM_MIN_MACS
_DEQUANT_MM_MIN_MACS = 1 << 36  # (4096³: ~0.2 ms of GPU time, where the path's ~90 µs of host time hides)


def _small(bn, chunks, warps, stages) -> dict:
    """Small-M tensor-core kernel: BLOCK_N weight rows per program, CHUNKS K chunks per iteration
    (split across ``num_warps`` warps), ``num_stages`` cp.async stages."""
    return {"kernel": "small", "BLOCK_N": bn, "CHUNKS": chunks, "num_warps": warps, "num_stages": stages}


def _gemv(bn, bk, warps, stages=1) -> dict:
    return {"kernel": "gemv", "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages}


def _mma(bm, bn, bk, split, warps, stages, scale_in, group_m=8) -> dict:
    """``ASM`` (absent = True) may be set False to run the float32 dequantization on the GPU too."""
    return {"kernel": "mma", "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "GROUP_M": group_m,
            "SCALE_IN": scale_in, "num_warps": warps, "num_stages": stages}


def _dequant_mm(bn=32, bk=256, warps=4) -> dict:
    """Dequantize to x.dtype in [BLOCK_N, BLOCK_K] tiles, then cuBLAS (``F.linear``)."""
    return {"kernel": "dequant_mm", "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps}


def _tma_wgmma(bm=256, bn=128, bk=64, warps=8, stages=4, group_m=8, persistent=False, stream_k=False) -> dict:
    """The Gluon kernel of :mod:`quantkit.kernels.wo_gemm_sm90` (sm_90, scales in x's 16-bit dtype):
    Y^T tiles with the dequantized weight as wgmma's register operand (``persistent``: one program per
    SM looping over tiles; ``stream_k``: persistent, the last partial wave split along K,
    ``wo_gemm_sm90.stream_k_split``). Elsewhere ``dequant_mm``."""
    cfg = {"kernel": "tma_wgmma", "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m,
           "num_warps": warps, "num_stages": stages}
    if persistent or stream_k:
        cfg["PERSISTENT"] = True
    if stream_k:
        cfg["STREAM_K"] = True
    return cfg


def _decode(mt=1, wk=4, wm=1, dk=128, sub=1, xpf=True, diag=False, dg=None, scale_in=False, maxnreg=None) -> dict:
    """The Gluon decode kernel of :mod:`quantkit.kernels.wo_decode_sm90` (sm_90, M <= 16): 16·MT·WM
    weight rows per program, WK warps splitting K in DK-deep chunks (SUB of them per warp and trip),
    WM warps splitting the rows; ``xpf``: x prefetched a trip ahead like the weight (else loaded at
    use); ``diag`` (used at M <= 4): the mma's eight columns take 8 / M consecutive chunks of a row, so
    16·MT·WM·M / 8 rows a program; ``dg`` (with ``diag``): at most that many chunks of a row a slot
    (``wo_decode_sm90.diag_chunks``); ``scale_in``: the weight (q - z)·s rounded once to x.dtype, as the
    Gluon GEMM's and dequant_mm's, at any group size (``wo_decode_sm90.scale_in``); ``maxnreg``: a
    register cap a thread. Elsewhere (and where it cannot run) the default small-M config."""
    cfg = {"kernel": "decode", "MT": mt, "WK": wk, "WM": wm, "DK": dk, "SUB": sub, "XPF": xpf}
    if diag:
        cfg["DIAG"] = True
    if dg is not None:
        cfg["DG"] = dg
    if scale_in:
        cfg["SCALE_IN"] = True
    if maxnreg is not None:
        cfg["MAXNREG"] = maxnreg
    return cfg


def check_config_entry(config: dict) -> None:
    """A ValueError for a config this family cannot run (what ``tuning`` checks a user-cache entry with)."""
    _check_config(config)


def _check_config(config: dict) -> None:
    check_keys("int4_weight_only", config, _KINDS, _POW2_KEYS)
    if config["kernel"] == "mma" and min(config["BLOCK_N"], config["BLOCK_M"], config["BLOCK_K"]) < 16:
        raise ValueError(f"int4_weight_only mma config: BLOCK_M, BLOCK_N and BLOCK_K must be >= 16 (tl.dot), "
                         f"got {config!r}")
    if config["kernel"] == "small" and config["BLOCK_N"] < 16:
        raise ValueError(f"int4_weight_only small config: BLOCK_N must be >= 16 (one mma row tile), got {config!r}")

    if config["kernel"] == "decode" and (config["DK"] not in (64, 128) or config["WK"] * config["WM"] > 16):
        raise ValueError(f"int4_weight_only decode config: DK must be 64 or 128 and WK·WM <= 16, got {config!r}")
    if config["kernel"] == "tma_wgmma":
        from quantkit.kernels.wo_gemm_sm90 import check_config

        check_config(config, "int4_weight_only", weight_bits=4)
    if config["kernel"] == "dequant_mm" and config["BLOCK_K"] < 8:
        raise ValueError(f"int4_weight_only dequant_mm config: BLOCK_K must be >= 8 (one word), got {config!r}")


def _split_for(blocks: int, k_tiles: int) -> int:
    """Split K (by powers of two) only while the output tiles alone leave SMs idle."""
    split = 1
    while blocks * split < _TARGET_PROGRAMS and split * 2 <= k_tiles:
        split *= 2
    return split


def _default_m1_gemv(N: int) -> dict:
    return _gemv(32, 512, 4, 3) if N >= 8192 else _gemv(8, 1024, 4, 3)


def _default_m1(N: int) -> dict:
    """M = 1 without a tuned entry: the decode kernel's DIAG programs below the lm_head's width, within 8 %
    of the best candidate on eleven H100 shapes and the best on seven (GEMV default before: up to 20 %
    slower; notes/int4_weight_only.md, round 14); the GEMV there and wherever the decode kernel cannot
    run."""
    return _decode(1, 1, wm=2, diag=True) if N < 65536 else _default_m1_gemv(N)


def _default_small(M: int, N: int, K: int) -> dict:
    # Up to M = 8: ~2 programs an SM along N (132 SMs), as wide as that allows, one chunk a warp
    # (CHUNKS = num_warps: s and z load straight into the layouts that use them). Above, the 16
    # activation columns cost as much as the weight per chunk and every program re-reads them from
    # L2: 32-row tiles halve both (one program an SM at N = 4096).
    if M <= 8:
        return _small(32 if N >= 32 * 2 * 132 else 16, 8, 8, 4)
    return _small(32, 8, 8, 3)


def _default_mma(M: int, N: int, K: int) -> dict:
    g = 128  # the recipes' default group size; BLOCK_K is clamped to the real one at launch
    if M <= 64:
        bm = max(16, triton.next_power_of_2(M))
        return _mma(bm, 64, 128, _split_for(ceil_div(N, 64), K // g), 4, 4, False)
    if M <= 256:
        blocks = ceil_div(N, 64) * ceil_div(M, 64)
        return _mma(64, 64, 128, _split_for(blocks, K // g), 4, 4, False)
    # 128 registers and 94 KB of shared memory a program: two fit on an SM, so one program's
    # dequantization overlaps the other's tensor-core work.
    return _mma(128, 128, 64, 1, 8, 4, True)


def _mid_tma_wgmma(M: int, N: int, K: int) -> dict:
    """The Gluon kernel for 16 < M <= 256 (:func:`quantkit.kernels.wo_gemm_sm90.mid_m_config`; BLOCK_K
    clamped to the group size at launch): on the H100 it took M = 128 from 0.78 / 0.96 / 0.77x of bf16
    (the Triton ``mma`` kernel) to 1.18-1.55x (notes/int4_weight_only.md, round 20)."""
    from quantkit.kernels.wo_gemm_sm90 import mid_m_config

    return mid_m_config(M, N, K)


def _fallback_config(M: int, N: int, K: int) -> dict:
    """Where the Gluon kernel cannot run (not sm_90, float32 x, scales of another dtype, K % 32 != 0):
    the Triton kernel below _DEQUANT_MM_MIN_M, cuBLAS on the dequantized weight from there."""
    return _default_mma(M, N, K) if M < _DEQUANT_MM_MIN_M else _dequant_mm()


# Groups smaller than this cut the small kernel's chunks (min(g, 128) deep).
_FULL_GROUP = 128
_DEQUANT_MM_MIN_MACS_SMALL_GROUP = 1 << 36  # _fit_group: dequant_mm at groups under 64 from M = 1024 and this size


def _fit_group(config: dict, M: int, N: int, K: int, group_size: int) -> dict:
    """A tuned or default config (chosen at group 128: the tables are keyed by shape alone) made fit for a smaller
    group (as fp8-block's ``_fit_block`` for its blocks). On an H100 (notes/int4_weight_only.md, round 34):

    * the small kernel at 4 < M <= 16: its K chunks are min(g, 128) deep, and at g = 32, M = 16 it ran 4096² in 22.2
      µs and 1024 x 4096 in 18.3 (under bf16's 12.7) where the decode kernel, which takes several groups a chunk,
      ran 16.1 and 12.5; at g = 64 16.4 / 12.7 against 15.9 / 12.2; at M = 8 (g = 32 / 64) 19.4 / 14.6 and 15.8 /
      11.9 against 14.6 / 14.3 and 10.9 / 10.6. The decode program by N, as the sweeps of the 14336-wide layers
      picked it (MT 4 with x at use: 28.2 µs at 14336 x 4096, g = 32, M = 16, where the small kernels took 44-63);
    * the Gluon GEMM at groups under 64 (two or more groups' zero-points and scales a K step) on problems of 2^36
      multiply-adds from M = 1024: the dequantized weight and cuBLAS, 20 % faster at 4096² M = 4096 (254.0 ->
      203.7 µs at g = 32); at M = 1024 on the 14336-wide layers (2^35.8) level or 4 % faster on the GPU
      (223.8 / 223.3, 222.8 / 213.5 µs), where its ~90 µs of host time a call would show eagerly.
    """
    if group_size >= _FULL_GROUP:
        return config
    kind = config["kernel"]
    if kind == "small" and 4 < M <= _SMALL_MAX_M:
        return _decode(1, 8) if N <= 2048 else _decode(1, 4) if N < 8192 else _decode(4, 4, xpf=False)
    if kind == "tma_wgmma" and group_size < 64 and M >= 1024 and M * N * K >= _DEQUANT_MM_MIN_MACS_SMALL_GROUP:
        return _dequant_mm(16, 512, 4)
    return config


def default_config(M: int, N: int, K: int) -> dict:
    """A heuristic config valid for every problem (the fallback when no tuned entry exists)."""
    if M <= _SMALL_MAX_M:
        # The H100 sweeps' winners away from the Llama shapes (1024x4096 and 128256x4096: the GEMV and
        # the small kernel; the Gluon decode kernel wins only on the tuned 14336-wide shapes).
        if M == 1:
            return _default_m1(N)
        return _small(64, 4, 4, 3) if N >= 8192 else _small(16, 4, 4, 4)
    if M > 256:
        # The Gluon kernel (the Triton kernel below _DEQUANT_MM_MIN_M and dequant_mm from it where it cannot
        # run): its tiles as int8 weights' (wo_gemm_sm90.large_m_config). cuBLAS on a dequantized weight only
        # for the largest problems: the dequantization pass is paid back from ~4K rows on the Llama shapes
        # (H100 sweep: 1.03-1.18x of dequant_mm's time at M = 4096, round 5), but the path costs the host
        # 86-109 µs a call, against 20-50 for one Gluon launch: on 13 shapes of other models at M = 2048 the
        # Gluon kernel ran 0.89-0.97x of bf16 eagerly, dequant_mm 0.57-0.90x (notes/int4_weight_only.md, round 33).
        if M >= _DEQUANT_MM_MIN_M_LARGE and M * N * K >= _DEQUANT_MM_MIN_MACS:
            return _dequant_mm()
        from quantkit.kernels.wo_gemm_sm90 import large_m_config

        return large_m_config(M, N, K)
    if M <= 64 and N <= 1024:
        # Narrow layers (k / v projections) in batched decoding: the small kernel in 16-row x tiles, N / 16
        # programs each, against the Gluon GEMM's N / 64 tiles: 1.02-1.23x of bf16 where the Gluon kernel ran
        # 0.83-1.05x at N = 512-1024, M = 17-64 on an H100 (notes/int4_weight_only.md, round 32)
        return _small(16, 4, 4, 4)
    return _mid_tma_wgmma(M, N, K)


def candidate_configs(M: int, N: int, K: int) -> list[dict]:
    """The search space of the offline sweep for an [M, K] x [N, K]^T problem (<= 8 configs)."""
    if M <= 1:
        # (CHUNKS=16 with 8 warps gave wrong outputs on an H100 at M=1, 510 of 512, cause not found:
        # the candidates keep one chunk a warp, as the defaults do, which passed every GPU test)
        # DIAG: one row's eight consecutive chunks a slot (512 contiguous bytes a warp load), in the place
        # of WK = 16, which no sweep picked (notes/int4_weight_only.md, round 14). Round 15's DIAG grid put
        # two more programs first, at 4096 x 14336 (MT 2, WK 2) and 1024 x 4096 (WK 2, WM 2), both with x
        # loaded at use; they took the places of WK = 8 with SUB 2 and the one-warp DIAG program, which no
        # sweep had picked since round 14. Round 25: MT 1 / WK 4 with x at use, 1.8 % ahead of x a trip ahead
        # at 14336 x 4096 (and in the decode step), which the H100 table ships, in the place of WK 8, which no
        # M = 1 table used (9 % slower in the decode step at 14336 x 4096, round 19)
        return [_gemv(8, 1024, 4, 3), _gemv(32, 512, 4, 3), _decode(1, 4), _decode(1, 4, xpf=False),
                _decode(1, 1, wm=2, diag=True), _decode(2, 2, xpf=False, diag=True),
                _decode(1, 2, wm=2, xpf=False, diag=True)]
    if M <= 4:
        # DIAG at M = 2-4: the x tile's idle columns take 4 (M = 2) or 2 (M = 3-4) chunks of a row
        # (notes/int4_weight_only.md, round 14: 14-23 % ahead of the M = 16 entries on the 14336 shapes)
        # Round 25: the DIAG programs of 14336 x 4096 at M = 2 (WK 1 / WM 2) and M = 4 (WK 2) with x at use,
        # 2.4-2.8 % ahead of x a trip ahead and shipped, in the places of MT 2 / WK 4 DIAG and the plain MT 2 /
        # WK 8 program, which no table used at M <= 4
        return [_small(16, 4, 4, 4), _small(64, 4, 4, 3), _decode(1, 4, diag=True), _decode(1, 2, diag=True),
                _decode(1, 2, xpf=False, diag=True), _decode(1, 1, wm=2, diag=True),
                _decode(1, 1, wm=2, xpf=False, diag=True), _decode(4, 4, xpf=False, diag=True)]
    if M <= 16:
        return [_small(16, 4, 4, 4), _small(64, 4, 4, 3), _decode(4, 4, xpf=False),
                _decode(2, 4), _decode(1, 4), _decode(1, 8), _decode(2, 8)]
    if M <= 256:
        # The Gluon kernel's tiles that led the H100 probe at M = 128 (notes/int4_weight_only.md, round 20);
        # the Triton kernel's configs, which the sweeps had shipped before, were 13-50 % behind at M = 128-256
        bm = 64 if M <= 64 else 128
        cands = [_mid_tma_wgmma(M, N, K), _tma_wgmma(bm, 64, 128, 4, 4, stream_k=True),
                 _tma_wgmma(bm, 128, 128, 8, 4, stream_k=True), _tma_wgmma(bm, 64, 128, 4, 3),
                 _tma_wgmma(256, 128, 64, 8, 4, stream_k=True) if M > 128 else _tma_wgmma(bm, 128, 128, 8, 4)]
        if M <= 64:  # at M = 32 on 4096 x 4096 and 4096 x 14336 the Triton kernel still led (by 2-7 %)
            cands += [_tma_wgmma(64, 64, 128, 4, 4), _default_mma(M, N, K), _small(16, 4, 4, 4)]  # (narrow, round 32)
        unique = []
        for c in cands:
            if c not in unique:
                unique.append(c)
        return unique[:8]
    return [_mma(128, 128, 64, 1, 8, 4, True), _dequant_mm(),
            _dequant_mm(16, 512, 4), _tma_wgmma(), _tma_wgmma(stages=6), _tma_wgmma(persistent=True),
            _tma_wgmma(stages=6, persistent=True), _tma_wgmma(stream_k=True)]


def make_bench_inputs(N: int, K: int, dtype: torch.dtype = torch.bfloat16) -> tuple:
    """(weight_packed, weight_scale, weight_zero_point, bias, group_size) on CUDA for the sweep:
    weights ~ N(0, 0.02²), min-max asymmetric, group 128, scales in ``dtype``, no bias."""
    from quantkit.reference.int4 import quantize_weight_int4

    w = torch.randn(N, K, device="cuda", dtype=dtype) * 0.02
    packed, scale, zero = quantize_weight_int4(w, 128, False, dtype)
    return packed, scale, zero, None, 128


# --------------------------------------------------------------------------- launchers
def _even_split(tiles: int, want: int) -> int:
    """The largest split <= ``want`` that divides ``tiles``: every split then runs the same trip
    count, so the loop needs no per-iteration bounds check."""
    want = max(1, min(want, tiles))
    while tiles % want:
        want -= 1
    return want


def _pow2_divisor(n: int, want: int) -> int:
    """The largest power of two <= ``want`` that divides ``n``."""
    d = 1
    while d * 2 <= want and n % (d * 2) == 0:
        d *= 2
    return d


def _asm_mode(x: torch.Tensor, config: dict) -> int:
    if _INTERPRET or x.dtype == torch.float32 or not config.get("ASM", True):
        return _MODE_F32
    return _MODE_BF16 if x.dtype == torch.bfloat16 else _MODE_F16


def _launch_small(x, packed, scale, zero, bias, y, group_size, config) -> None:
    M, K = x.shape
    N = y.shape[1]
    dk = min(group_size, 128)
    chunks = _pow2_divisor(K // dk, config["CHUNKS"])
    bm = triton.next_power_of_2(min(M, _SMALL_MAX_M))
    warps = min(config["num_warps"], chunks)  # the warps split the chunks (the batch of the dot)
    _small_fast[(ceil_div(N, config["BLOCK_N"]), ceil_div(M, bm))](
        x, packed, scale, zero, bias if bias is not None else scale, y,
        M, N, K // 8, K // group_size, x.stride(0), _loop_bound(K // (dk * chunks)),
        R=group_size // dk, BLOCK_M=bm, BLOCK_N=config["BLOCK_N"], DK=dk, CHUNKS=chunks, MODE=_asm_mode(x, config),
        HAS_BIAS=bias is not None, PREFETCH=not _INTERPRET, num_warps=warps, num_stages=config["num_stages"])


def _launch_gemv(x, packed, scale, zero, bias, y, group_size, config) -> None:
    M, K = x.shape
    N = y.shape[1]
    G = K // group_size
    gpt = max(1, config["BLOCK_K"] // group_size)
    gpt = min(gpt, triton.next_power_of_2(G))
    bn = config["BLOCK_N"]
    _gemv_fast[(ceil_div(N, bn), M)](
        x, packed, scale, zero, bias if bias is not None else scale, y,
        N, K // 8, G, x.stride(0), _loop_bound(ceil_div(G, gpt)), _MAGIC,
        GROUP=group_size, BLOCK_N=bn, GROUPS_PER_TILE=gpt, EVEN_G=G % gpt == 0,
        HAS_BIAS=bias is not None, NUM_STAGES=config["num_stages"], num_warps=config["num_warps"],
        num_stages=config["num_stages"])


def _mma_tiles(x, group_size, config) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) that ``_mma_kernel`` runs ``config`` with."""
    M = x.shape[0]
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], min(config["BLOCK_K"], group_size)
    warps, stages = config["num_warps"], config["num_stages"]
    bm = min(bm, max(16, triton.next_power_of_2(M)))
    if x.dtype == torch.float32:
        # Full-precision float32 dot products run on CUDA cores: keep the tiles small.
        bm, bn, bk, warps, stages = min(bm, 32), min(bn, 64), min(bk, 32), 4, min(stages, 2)
    return bm, bn, bk, warps, stages


def _mma_split(x, group_size, config) -> int:
    """How many K splits ``_mma_kernel`` runs ``config`` with (1: no float32 partials). Split-K only
    where the GPU time dwarfs the partials and a second launch (never for M <= 16)."""
    M, K = x.shape
    return _even_split(K // _mma_tiles(x, group_size, config)[2], config["SPLIT_K"]) if M > _SMALL_MAX_M else 1


def _launch_mma(x, packed, scale, zero, bias, y, group_size, config, ws=None) -> None:
    """``ws``: the float32 [split, M, N] partials where the config splits K (``linear`` carves them
    from y's allocation; left out, they are allocated here)."""
    M, K = x.shape
    N = y.shape[1]
    bm, bn, bk, warps, stages = _mma_tiles(x, group_size, config)
    scale_in = bool(config["SCALE_IN"])
    # The interpreter (triton 3.6) multiplies bf16 dot operands as their raw uint16 bits and truncates
    # float32 -> bf16 casts: there every dot runs in float32.
    dot_f32 = x.dtype == torch.float32 or _INTERPRET
    k_tiles = K // bk
    if ws is not None:  # carved by linear() for this config's split
        split = ws.shape[0]
    else:
        split = _mma_split(x, group_size, config)
        ws = y if split == 1 else torch.empty((split, M, N), dtype=torch.float32, device=x.device)
    tiles = k_tiles // split
    grid = (ceil_div(M, bm) * ceil_div(N, bn), split)
    _mma_fast[grid](
        x, packed, scale, zero, bias if bias is not None else scale, y, ws,
        M, N, K // 8, K // group_size, x.stride(0), _loop_bound(tiles),
        GROUP=group_size, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=config["GROUP_M"], MODE=_asm_mode(x, config),
        SCALE_IN=scale_in, DOT_F32=dot_f32, EVEN_M=M % bm == 0, USE_WS=split > 1, HAS_BIAS=bias is not None,
        num_warps=warps, num_stages=stages)
    if split > 1:
        MN = M * N
        block = 1024
        _reduce_fast[(ceil_div(MN, block),)](
            ws, bias if bias is not None else ws, y, MN, N, SPLIT_K=split, BLOCK=block,
            HAS_BIAS=bias is not None, num_warps=4)


def dequantize(packed, scale, zero, group_size: int, dtype: torch.dtype, config: dict | None = None) -> torch.Tensor:
    """The weight [N, K] in ``dtype``: (q - z) * s rounded once (exact for float32)."""
    config = config or _dequant_mm()
    N, G = scale.shape
    K = G * group_size
    out = torch.empty((N, K), dtype=dtype, device=packed.device)
    bkw = max(1, config["BLOCK_K"] // 8)
    # The PTX multiplies by the scale in the output dtype; a scale of another dtype takes the float32
    # path, so that the weight is still (q - z)·s rounded once (as the reference rounds it).
    if _INTERPRET or dtype == torch.float32 or scale.dtype != dtype or not config.get("ASM", True):
        mode = _MODE_F32
    else:
        mode = _MODE_BF16 if dtype == torch.bfloat16 else _MODE_F16
    _dequant_fast[(ceil_div(N, config["BLOCK_N"]), ceil_div(K // 8, bkw))](
        packed, scale, zero, out, N, K // 8, G,
        GROUP=group_size, BLOCK_N=config["BLOCK_N"], BLOCK_KW=bkw, MODE=mode,
        ROUND_BF16=mode == _MODE_F32 and dtype == torch.bfloat16, num_warps=config["num_warps"])
    return out


def dequantize_weight(packed, scale, zero, group_size: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The reference's ``dequantize_weight_int4`` on the GPU (the layers' input gradient multiplies by it)."""
    return dequantize(packed.contiguous(), scale.contiguous(), zero.contiguous(), group_size, dtype)


def _run_dequant_mm(x, packed, scale, zero, bias, group_size, config) -> torch.Tensor:
    w = dequantize(packed, scale, zero, group_size, x.dtype, config)
    if bias is not None and bias.dtype != x.dtype:
        bias = bias.to(x.dtype)
    return F.linear(x, w, bias)


def _bench_fn(x, weight_packed, weight_scale, weight_zero_point, bias, group_size):
    def bench(config: dict) -> float:
        import triton.testing

        fn = lambda: linear(x, weight_packed, weight_scale, weight_zero_point, bias, group_size,  # noqa: E731
                            config=config)
        fn()
        return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")

    return bench


def linear(x: torch.Tensor, weight_packed: torch.Tensor, weight_scale: torch.Tensor,
           weight_zero_point: torch.Tensor, bias: torch.Tensor | None = None, group_size: int = 128, *,
           config: dict | None = None) -> torch.Tensor:
    """The whole Int4WeightOnlyLinear forward on ``x`` [M, K] (same signature as the reference's
    ``int4_weight_only_linear``); ``config`` forces a kernel config (see ``candidate_configs``)."""
    M, N, K = _check_inputs(x, weight_packed, weight_scale, weight_zero_point, bias, group_size)
    if config is None:
        if x.device.type == "cuda":
            from quantkit.kernels.tuning import get_config

            config = get_config(FAMILY, M, N, K, module=sys.modules[__name__],
                                bench=_bench_fn(x, weight_packed, weight_scale, weight_zero_point, bias, group_size))
            if M > 256:  # 256-row tiles at M between the tuned buckets: mostly padding past a multiple of 256
                from quantkit.kernels.wo_gemm_sm90 import fit_rows

                config = fit_rows(config, M)
        else:
            config = default_config(M, N, K)
        config = _fit_group(config, M, N, K, group_size)
    _check_config(config)
    kind = config["kernel"]
    if kind == "gemv" and M != 1:
        config = default_config(M, N, K)
        kind = config["kernel"]
    if kind == "decode":
        from quantkit.kernels import wo_decode_sm90

        if 0 < M <= _SMALL_MAX_M and N > 0 and wo_decode_sm90.usable(x, weight_packed, weight_scale, group_size,
                                                                      config):
            y = torch.empty((M, N), dtype=x.dtype, device=x.device)
            wo_decode_sm90.launch(x, weight_packed, weight_scale, weight_zero_point, bias, y, group_size, config)
            return y
        config = (_default_m1_gemv(N) if M == 1 else _default_small(M, N, K) if M <= _SMALL_MAX_M
                  else default_config(M, N, K))
        kind = config["kernel"]
    if kind == "tma_wgmma":
        from quantkit.kernels import wo_gemm_sm90

        if M > 0 and N > 0 and wo_gemm_sm90.usable_int4(x, weight_packed, weight_scale, group_size,
                                                          config["BLOCK_K"]):
            return wo_gemm_sm90.launch_int4(x, weight_packed, weight_scale, weight_zero_point, bias, group_size,
                                            config)
        config = _fallback_config(M, N, K)  # where the Gluon kernel cannot run
        kind = config["kernel"]
    if kind == "dequant_mm" and M > 0 and N > 0:
        return _run_dequant_mm(x, weight_packed, weight_scale, weight_zero_point, bias, group_size, config)
    if M == 0 or N == 0:
        return torch.empty((M, N), dtype=x.dtype, device=x.device)
    if kind == "mma" and (split := _mma_split(x, group_size, config)) > 1:
        # The float32 partials live behind the output, in its allocation (one allocation a call).
        y, ws = out_with_workspace(M, N, x.dtype, x.device, 4 * split * M * N)
        _launch_mma(x, weight_packed, weight_scale, weight_zero_point, bias, y, group_size, config,
                    ws.view(torch.float32).view(split, M, N))
        return y
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if kind == "small":
        _launch_small(x, weight_packed, weight_scale, weight_zero_point, bias, y, group_size, config)
    elif kind == "gemv":
        _launch_gemv(x, weight_packed, weight_scale, weight_zero_point, bias, y, group_size, config)
    else:
        _launch_mma(x, weight_packed, weight_scale, weight_zero_point, bias, y, group_size, config)
    return y
