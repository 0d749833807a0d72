"""int4 weight-only (A16W4) Triton kernels: ``y = x @ dequant(W)^T (+ bias)`` with 4-bit group-wise weights.

Numerics (those of :func:`quantkit.reference.int4.int4_weight_only_linear`)::

    W[n, k] = (q[n, k] - z[n, k // g]) * s[n, k // g]        q, z in 0..15, s any float dtype
    y[m, n] = sum_k x[m, k] * W[n, k]  (+ bias[n])            float32 accumulation, cast to x.dtype

Layout (documented in :mod:`quantkit.reference.int4`): ``weight_packed`` uint8 [N, K/2], read here as
little-endian int32 words [N, K/8]: word w of row n holds q[n, 8w + i] in bits 4i..4i+3.
``weight_scale`` [N, K/g] (bf16, fp16 or fp32), ``weight_zero_point`` uint8 [N, K/g], all contiguous;
``bias`` [N] in any float dtype; ``x`` [M, K] with unit stride along K (any row stride); output [M, N].

Kernels (the reasoning and the per-cell byte/FLOP counts are in notes/int4_weight_only.md)
  * ``_gemv_kernel`` (decode, M <= 16): CUDA cores, float32 throughout. Each program streams
    BLOCK_N rows x GROUPS_PER_TILE whole groups per iteration with 16-byte loads. A nibble becomes a
    float with one LOP3: ``(word & (0xF << p)) | 0x4B000000`` is the float 2^23 + q·2^p exactly
    (p = 0, 4, .., 16; the top three nibbles are first shifted down by 12), so ``- 2^23`` gives
    q·2^p and the 2^-p goes into the activation once per tile. Per group:
    ``s * (sum q*x - z * sum x)``. Grid (N / BLOCK_N, M, SPLIT_K).
  * ``_mma_kernel`` (M >= 2, and a candidate at M = 1): tensor cores, acc[BM, BN] += x tile ·
    W tile^T with the weight tile dequantized in the K loop. On the GPU a short PTX sequence turns
    one int32 word into eight bf16/fp16 values: PRMT moves byte j's two nibbles into the two
    halves of a register, one LOP3 ORs in the exponent of 128 (bf16) / 1024 (fp16), and a packed
    FMA subtracts (128 + z) exactly — two weights per instruction. ``SCALE_IN`` multiplies by the
    scale there as well (one rounding of (q - z)·s to the activation dtype, as a bf16 weight would
    be); without it (decode sizes) the dot takes the exact integer weights q - z and the float32
    partial product of the tile is scaled instead (one group per tile: BLOCK_K <= g), which is both
    cheaper and float32-exact. For BLOCK_M = 16 Triton feeds mma.sync from registers (its operand
    layout lets each thread take whole words); for BLOCK_M >= 64 wgmma reads the tile from shared
    memory, and Triton waits for each wgmma before the next tile is dequantized (two programs per
    SM overlap instead). Grouped launch order, software-pipelined loads (num_stages).
  * ``_mma_swap_kernel`` (config ``SWAP``): the same product as Y^T tile = W tile · X^T tile, the
    dequantized weight being the left operand that wgmma reads from registers; the packed bytes
    go from shared memory straight into the fragment layout (one byte, two weights, per element),
    and Triton keeps the wgmma of one tile in flight while the next is dequantized.
  Float32 activations (and the interpreter) take the same paths in float32 arithmetic with
  ``input_precision="ieee"``.
  * ``_splitk_reduce_kernel``: with SPLIT_K > 1 the K range is split across programs that write
    float32 partials to a workspace [SPLIT_K, M, N]; this second launch sums them in a fixed order
    (deterministic), adds the bias and casts. The workspace is the only allocation besides the
    output, and only for split configs (the caching allocator serves it; inside CUDA-graph capture
    it comes from the graph's pool).

Limits: group_size a power of two >= 16 (the recipes use 32, 64, 128, 256) and K % group_size == 0;
M and N arbitrary. ``linear`` picks a config per problem (``quantkit.kernels.tuning``: tuned table,
else ``default_config``): ``{"kernel": "gemv", ...}`` or ``{"kernel": "mma", ...}``; a gemv config is
honoured for M <= 16, above that the mma kernel runs with its default config.
"""
from __future__ import annotations

import os
import sys

import torch
import triton
import triton.language as tl

MIN_CAPABILITY = (8, 0)
FAMILY = "int4_weight_only"

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_GEMV_MAX_M = 16
# float32 2^23 has an all-zero mantissa: OR-ing a nibble into bits 0..22 gives 2^23 + value exactly.
_MAGIC = 0x4B000000
_MAGIC_F = tl.constexpr(8388608.0)
_MAGIC_C = tl.constexpr(_MAGIC)

# dequantization modes of the mma kernel
_MODE_F32 = 0  # float32 arithmetic (float32 activations, the interpreter, or ASM disabled)
_MODE_BF16 = 1
_MODE_F16 = 2


def _asm_dequant(fp16: bool, scale: bool) -> str:
    """PTX for ``tl.inline_asm_elementwise(pack=2)`` over ``join(words, words)``: the pair of
    elements (word, 0), (word, 1) of output j receives codes 2j and 2j+1 of the word (byte j's low
    and high nibble), minus the zero-point, times the scale if ``scale``.

    Operands: $0..$3 the four outputs (16-bit pairs), $4 (= $5) the word, $6 the pair
    (magic + z, magic + z), $7 the scale pair. ``magic | q`` is the 16-bit float magic + q (128 for
    bf16, 1024 for fp16, both with a unit last mantissa bit), so ``(magic | q) - (magic + z)`` is
    exactly q - z; the scale multiply (an FMA with -0.0) rounds once."""
    magic, one, fma = ("0x64006400", "0x3C003C00", "fma.rn.f16x2") if fp16 else \
        ("0x43004300", "0x3F803F80", "fma.rn.bf16x2")
    lines = ["{", ".reg .b32 t, u, one, nz, mz;", f"mov.b32 one, {one};", "mov.b32 mz, 0x80008000;",
             "xor.b32 nz, $6, 0x80008000;", "shr.b32 u, $4, 4;"]
    for j in range(4):
        # byte 0 <- byte j of the word (low nibble = code 2j); byte 2 <- byte j of word >> 4 (code 2j+1)
        lines.append(f"prmt.b32 t, $4, u, 0x{4 + j}{4 + j}{j}{j};")
        lines.append(f"lop3.b32 t, t, 0x000F000F, {magic}, 0xEA;")  # (t & mask) | magic
        if scale:
            lines.append(f"{fma} t, t, one, nz;")
            lines.append(f"{fma} ${j}, t, $7, mz;")
        else:
            lines.append(f"{fma} ${j}, t, one, nz;")
    lines.append("}")
    return "\n".join(lines)


def _asm_dequant_bytes(fp16: bool, scale: bool) -> str:
    """PTX for ``tl.inline_asm_elementwise(pack=4)`` over a uint8 tensor of packed bytes: outputs
    ``lo`` and ``hi`` get byte e's low / high nibble (the codes at k = 2j and 2j+1 for byte j of a
    row), minus the zero-point, times the scale if ``scale``. Operands: $0 $1 lo pairs (e0 e1, e2 e3),
    $2 $3 hi pairs, $4 the four bytes, $5 $6 the (magic + z) pairs, $7 $8 the scale pairs (elements of
    one pack may sit in different rows, so every pair is used as given)."""
    magic, one, fma = ("0x64006400", "0x3C003C00", "fma.rn.f16x2") if fp16 else \
        ("0x43004300", "0x3F803F80", "fma.rn.bf16x2")
    lines = ["{", ".reg .b32 t, u, one, nz, mz;", f"mov.b32 one, {one};", "mov.b32 mz, 0x80008000;"]
    for h in range(2):  # h = 0: bytes 0, 1 (elements e0, e1); h = 1: bytes 2, 3
        # byte 0 <- byte 2h, byte 2 <- byte 2h+1; (t >> 4) brings their high nibbles down
        lines.append(f"prmt.b32 t, $4, 0, 0x{2 * h + 1}{2 * h + 1}{2 * h}{2 * h};")
        lines.append("shr.b32 u, t, 4;")
        lines.append(f"lop3.b32 t, t, 0x000F000F, {magic}, 0xEA;")
        lines.append(f"lop3.b32 u, u, 0x000F000F, {magic}, 0xEA;")
        lines.append(f"xor.b32 nz, ${5 + h}, 0x80008000;")
        if scale:
            lines.append(f"{fma} t, t, one, nz;")
            lines.append(f"{fma} u, u, one, nz;")
            lines.append(f"{fma} ${h}, t, ${7 + h}, mz;")
            lines.append(f"{fma} ${2 + h}, u, ${7 + h}, mz;")
        else:
            lines.append(f"{fma} ${h}, t, one, nz;")
            lines.append(f"{fma} ${2 + h}, u, one, nz;")
    lines.append("}")
    return "\n".join(lines)


_ASM_BF16_SUB = tl.constexpr(_asm_dequant(False, False))
_ASM_BF16_SCALE = tl.constexpr(_asm_dequant(False, True))
_ASM_F16_SUB = tl.constexpr(_asm_dequant(True, False))
_ASM_F16_SCALE = tl.constexpr(_asm_dequant(True, True))
_ASMB_BF16_SUB = tl.constexpr(_asm_dequant_bytes(False, False))
_ASMB_BF16_SCALE = tl.constexpr(_asm_dequant_bytes(False, True))
_ASMB_F16_SUB = tl.constexpr(_asm_dequant_bytes(True, False))
_ASMB_F16_SCALE = tl.constexpr(_asm_dequant_bytes(True, True))


def _loop_bound(n: int):
    """A trip count as the kernels receive it. Under the interpreter (triton 3.6, numpy >= 2.4) a
    runtime integer argument is a 1-element array that ``range()`` cannot take, so it goes in as a
    constexpr there; compiled kernels get a plain int (no recompilation per value)."""
    return tl.constexpr(n) if _INTERPRET else n


# --------------------------------------------------------------------------- device code
@triton.jit
def _nib_f32(v, MASK: tl.constexpr, magic):
    # (v & MASK) sits in bits 0..22: 2^23 + that, minus 2^23, exactly. ``magic`` is a runtime value so
    # that the AND and the OR fuse into one LOP3 (two immediates would not).
    return ((v & MASK) | magic).to(tl.float32, bitcast=True) - _MAGIC_F


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, s_ptr, z_ptr, b_ptr, y_ptr, ws_ptr,
                 M, N, KW, G, stride_xm, TILES, magic,
                 GROUP: tl.constexpr, BLOCK_N: tl.constexpr, GROUPS_PER_TILE: tl.constexpr,
                 EVEN_G: tl.constexpr, USE_WS: tl.constexpr, HAS_BIAS: tl.constexpr, NUM_STAGES: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    WPG: tl.constexpr = GROUP // 8  # int32 words per group
    BKW: tl.constexpr = GROUPS_PER_TILE * WPG
    w_ptr = w_ptr.to(tl.pointer_type(tl.int32))  # the uint8 [N, K/2] buffer read as words [N, K/8]

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = offs_n % N  # in-bounds loads everywhere; the store is masked
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
        g0 = (pid_k * TILES + it) * GROUPS_PER_TILE
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
    n_ok = offs_n < N
    if USE_WS:
        tl.store(ws_ptr + (pid_k * M + pid_m).to(tl.int64) * N + offs_n, y, mask=n_ok)
    else:
        if HAS_BIAS:
            y += tl.load(b_ptr + rows).to(tl.float32)
        tl.store(y_ptr + pid_m.to(tl.int64) * N + offs_n, y.to(y_ptr.dtype.element_ty), mask=n_ok)


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
def _mma_kernel(x_ptr, w_ptr, s_ptr, z_ptr, b_ptr, y_ptr, ws_ptr,
                M, N, KW, G, stride_xm, TILES,
                GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                GROUP_M: tl.constexpr, MODE: tl.constexpr, SCALE_IN: tl.constexpr, DOT_F32: tl.constexpr,
                EVEN_M: tl.constexpr, USE_WS: tl.constexpr, HAS_BIAS: tl.constexpr):
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # Grouped order: GROUP_M consecutive m-tiles walk the n-tiles together, so each weight tile and
    # each activation tile is fetched from DRAM about once per group instead of once per program.
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

    BKW: tl.constexpr = BLOCK_K // 8
    w_ptr = w_ptr.to(tl.pointer_type(tl.int32))  # the uint8 [N, K/2] buffer read as words [N, K/8]
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = offs_n % N  # in-bounds weight loads; the store is masked
    m_ok = offs_m < M
    x_ptrs = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm + tl.arange(0, BLOCK_K)[None, :]
    w_ptrs = w_ptr + rows[:, None] * KW + tl.arange(0, BKW)[None, :]
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
        # o_j[n, w, e] is code 8w + 2j + e: interleave back to k order
        q = tl.join(tl.join(o0, o2), tl.join(o1, o3))  # [BN, BKW, e, a, b]: code 4a + 2b + e
        w = tl.reshape(tl.permute(q, (0, 1, 3, 4, 2)), (BLOCK_N, BLOCK_K))
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
def _dequant_bytes(b, z, s, MODE: tl.constexpr, SCALE_IN: tl.constexpr):
    """b [BN, BKB] uint8, z [BN] uint8, s [BN] float -> (lo, hi) [BN, BKB]: byte j's low / high
    nibble (codes 2j, 2j+1) minus z, times s if SCALE_IN; float32 for MODE 0, else bf16 / fp16."""
    if MODE == 0:
        bi = b.to(tl.int32)
        zf = (z.to(tl.int32) | _MAGIC_C).to(tl.float32, bitcast=True)[:, None]  # 2^23 + z
        lo = ((bi & 0xF) | _MAGIC_C).to(tl.float32, bitcast=True) - zf
        hi = ((bi >> 4) | _MAGIC_C).to(tl.float32, bitcast=True) - zf
        if SCALE_IN:
            lo = lo * s.to(tl.float32)[:, None]
            hi = hi * s.to(tl.float32)[:, None]
    else:
        if MODE == 1:
            zh = (z.to(tl.int16) | 0x4300).to(tl.bfloat16, bitcast=True)[:, None]
            if SCALE_IN:
                lo, hi = tl.inline_asm_elementwise(
                    _ASMB_BF16_SCALE, "=r,=r,=r,=r,r,r,r,r,r", [b, zh, s.to(tl.bfloat16)[:, None]],
                    dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
            else:
                lo, hi = tl.inline_asm_elementwise(
                    _ASMB_BF16_SUB, "=r,=r,=r,=r,r,r,r", [b, zh],
                    dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
        else:
            zh = (z.to(tl.int16) | 0x6400).to(tl.float16, bitcast=True)[:, None]
            if SCALE_IN:
                lo, hi = tl.inline_asm_elementwise(
                    _ASMB_F16_SCALE, "=r,=r,=r,=r,r,r,r,r,r", [b, zh, s.to(tl.float16)[:, None]],
                    dtype=(tl.float16, tl.float16), is_pure=True, pack=4)
            else:
                lo, hi = tl.inline_asm_elementwise(
                    _ASMB_F16_SUB, "=r,=r,=r,=r,r,r,r", [b, zh],
                    dtype=(tl.float16, tl.float16), is_pure=True, pack=4)
    return lo, hi


@triton.jit
def _mma_swap_kernel(x_ptr, w_ptr, s_ptr, z_ptr, b_ptr, y_ptr, ws_ptr,
                     M, N, KB, G, stride_xm, TILES,
                     GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr, MODE: tl.constexpr, SCALE_IN: tl.constexpr, DOT_F32: tl.constexpr,
                     EVEN_M: tl.constexpr, USE_WS: tl.constexpr, HAS_BIAS: tl.constexpr):
    """Y^T tile [BN, BM] = W tile · X^T tile: the dequantized weight is the left operand, which
    wgmma reads from registers (the bytes come from shared memory straight into the fragment
    layout), so the tensor cores can run one tile behind the dequantization."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

    BKB: tl.constexpr = BLOCK_K // 2
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = offs_n % N
    m_ok = offs_m < M
    x_ptrs = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm + tl.arange(0, BLOCK_K)[None, :]
    w_ptrs = w_ptr + rows[:, None] * KB + tl.arange(0, BKB)[None, :]
    s_ptrs = s_ptr + rows * G
    z_ptrs = z_ptr + rows * G

    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    for it in range(0, TILES):
        t = pid_k * TILES + it
        b = tl.load(w_ptrs + t * BKB)  # [BLOCK_N, BKB] bytes
        g = (t * BLOCK_K) // GROUP
        s = tl.load(s_ptrs + g)
        z = tl.load(z_ptrs + g)
        lo, hi = _dequant_bytes(b, z, s, MODE, SCALE_IN)
        w = tl.reshape(tl.join(lo, hi), (BLOCK_N, BLOCK_K))  # byte j -> codes 2j, 2j+1
        if EVEN_M:
            xt = tl.load(x_ptrs + t * BLOCK_K)
        else:
            xt = tl.load(x_ptrs + t * BLOCK_K, mask=m_ok[:, None], other=0.0)
        if DOT_F32:
            w = w.to(tl.float32)
            xtt = tl.trans(xt.to(tl.float32))
        else:
            w = w.to(x_ptr.dtype.element_ty)
            xtt = tl.trans(xt)
        if SCALE_IN:
            acc = tl.dot(w, xtt, acc, input_precision="ieee" if DOT_F32 else None)
        else:
            acc += tl.dot(w, xtt, input_precision="ieee" if DOT_F32 else None) * s.to(tl.float32)[:, None]

    mask = (offs_n < N)[:, None] & m_ok[None, :]
    if USE_WS:
        ptrs = ws_ptr + (pid_k * M + offs_m.to(tl.int64))[None, :] * N + offs_n[:, None]
        tl.store(ptrs, acc, mask=mask)
    else:
        if HAS_BIAS:
            acc += tl.load(b_ptr + rows).to(tl.float32)[:, None]
        ptrs = y_ptr + offs_m.to(tl.int64)[None, :] * N + offs_n[:, None]
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


# --------------------------------------------------------------------------- host side: checks
def _check_device(t: torch.Tensor, name: str, device) -> None:
    if t.device.type != "cuda" and not _INTERPRET:
        raise ValueError(f"int4_weight_only kernels need CUDA tensors (or TRITON_INTERPRET=1); {name} is on "
                         f"{t.device}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but the activation is on {device}")


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
_GEMV_KEYS = ("BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages")
_MMA_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "GROUP_M", "SCALE_IN", "num_warps", "num_stages")
_TARGET_PROGRAMS = 256  # about two per SM on an H100 (132 SMs): enough to hide a tail


def _gemv(bn, bk, split, warps, stages=1) -> dict:
    return {"kernel": "gemv", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": warps,
            "num_stages": stages}


def _mma(bm, bn, bk, split, warps, stages, scale_in, swap=False, group_m=8) -> dict:
    """``SWAP`` runs ``_mma_swap_kernel`` (weight as the left operand). ``ASM`` (absent = True) may
    be set False to run the float32 dequantization on the GPU too."""
    return {"kernel": "mma", "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "GROUP_M": group_m,
            "SCALE_IN": scale_in, "SWAP": swap, "num_warps": warps, "num_stages": stages}


def _check_config(config: dict) -> None:
    keys = {"gemv": _GEMV_KEYS, "mma": _MMA_KEYS}.get(config.get("kernel"))
    if keys is None:
        raise ValueError(f"int4_weight_only config: 'kernel' must be 'gemv' or 'mma', got {config!r}")
    missing = [k for k in keys if k not in config]
    if missing:
        raise ValueError(f"int4_weight_only config {config!r} lacks {missing}")
    for k in ("BLOCK_N", "BLOCK_K") + (("BLOCK_M",) if config["kernel"] == "mma" else ()):
        v = config[k]
        if not isinstance(v, int) or v < 1 or v & (v - 1):
            raise ValueError(f"int4_weight_only config: {k} must be a power of two, got {config!r}")
    if config["kernel"] == "mma" and min(config["BLOCK_N"], config["BLOCK_M"], config["BLOCK_K"]) < 16:
        raise ValueError(f"int4_weight_only mma config: BLOCK_M, BLOCK_N and BLOCK_K must be >= 16 (tl.dot), "
                         f"got {config!r}")


def _split_for(blocks: int, k_tiles: int) -> int:
    """Split K (by powers of two) only while the output tiles alone leave SMs idle."""
    split = 1
    while blocks * split < _TARGET_PROGRAMS and split * 2 <= k_tiles:
        split *= 2
    return split


def _default_mma(M: int, N: int, K: int) -> dict:
    g = 128  # the recipes' default group size; BLOCK_K is clamped to the real one at launch
    if M <= 16:
        return _mma(16, 64, 128, _split_for(triton.cdiv(N, 64), K // g), 4, 4, False)
    if M <= 64:
        bm = triton.next_power_of_2(M)
        return _mma(bm, 64, 128, _split_for(triton.cdiv(N, 64), K // g), 4, 4, False)
    if M <= 256:
        blocks = triton.cdiv(N, 64) * triton.cdiv(M, 64)
        return _mma(64, 64, 128, _split_for(blocks, K // g), 4, 4, False)
    # 128 registers and 94 KB of shared memory a program: two fit on an SM, so one program's
    # dequantization overlaps the other's tensor-core work.
    return _mma(128, 128, 64, 1, 8, 4, True)


def default_config(M: int, N: int, K: int) -> dict:
    """A heuristic config valid for every problem (the fallback when no tuned entry exists)."""
    if M == 1:
        bn = 8
        return _gemv(bn, 1024, _split_for(triton.cdiv(N, bn), max(1, K // 1024)), 4, 3)
    return _default_mma(M, N, K)


def candidate_configs(M: int, N: int, K: int) -> list[dict]:
    """The search space of the offline sweep for an [M, K] x [N, K]^T problem (<= 8 configs)."""
    if M <= 1:
        return [_gemv(8, 1024, 1, 4, 3), _gemv(16, 1024, 1, 4, 3), _gemv(16, 1024, 2, 4, 3), _gemv(32, 512, 1, 4, 3),
                _gemv(8, 512, 1, 4, 1), _mma(16, 64, 128, 4, 4, 4, False), _mma(16, 128, 128, 8, 4, 4, False)]
    if M <= 16:
        return [_mma(16, 64, 128, 4, 4, 4, False), _mma(16, 128, 128, 8, 4, 4, False),
                _mma(16, 64, 128, 2, 4, 4, False), _mma(16, 64, 128, 1, 4, 4, False), _mma(16, 32, 128, 4, 4, 4, False),
                _mma(16, 64, 128, 4, 4, 4, False, True)]
    if M <= 256:
        return [_mma(64, 64, 128, 1, 4, 4, False), _mma(64, 128, 64, 2, 4, 4, True), _mma(64, 64, 128, 2, 4, 4, False),
                _mma(64, 128, 64, 1, 4, 4, True), _mma(128, 128, 64, 1, 8, 4, True),
                _mma(64, 128, 64, 1, 4, 4, True, True), _mma(64, 64, 128, 1, 4, 4, False, True)]
    return [_mma(128, 128, 64, 1, 8, 4, True), _mma(256, 128, 64, 1, 8, 3, True), _mma(128, 256, 64, 1, 8, 3, True),
            _mma(64, 128, 64, 1, 4, 4, True), _mma(128, 128, 64, 1, 8, 4, True, True),
            _mma(256, 128, 64, 1, 8, 3, True, True), _mma(64, 128, 64, 1, 4, 4, True, True)]


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


def _finish_split(ws: torch.Tensor, bias, y: torch.Tensor, split: int) -> None:
    MN = y.numel()
    block = 1024
    _splitk_reduce_kernel[(triton.cdiv(MN, block),)](
        ws, bias if bias is not None else ws, y, MN, y.shape[1], SPLIT_K=split, BLOCK=block,
        HAS_BIAS=bias is not None, num_warps=4)


def _launch_gemv(x, packed, scale, zero, bias, y, group_size, config) -> None:
    M, K = x.shape
    N = y.shape[1]
    G = K // group_size
    gpt = max(1, config["BLOCK_K"] // group_size)
    gpt = min(gpt, triton.next_power_of_2(G))
    n_tiles = triton.cdiv(G, gpt)
    split = _even_split(n_tiles, config["SPLIT_K"])
    tiles = n_tiles // split
    bn = config["BLOCK_N"]
    ws = torch.empty((split, M, N), dtype=torch.float32, device=x.device) if split > 1 else y
    _gemv_kernel[(triton.cdiv(N, bn), M, split)](
        x, packed, scale, zero, bias if bias is not None else scale, y, ws,
        M, N, K // 8, G, x.stride(0), _loop_bound(tiles), _MAGIC,
        GROUP=group_size, BLOCK_N=bn, GROUPS_PER_TILE=gpt, EVEN_G=G % gpt == 0, USE_WS=split > 1,
        HAS_BIAS=bias is not None, NUM_STAGES=config["num_stages"], num_warps=config["num_warps"],
        num_stages=config["num_stages"])
    if split > 1:
        _finish_split(ws, bias, y, split)


def _launch_mma(x, packed, scale, zero, bias, y, group_size, config) -> None:
    M, K = x.shape
    N = y.shape[1]
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], min(config["BLOCK_K"], group_size)
    warps, stages, scale_in = config["num_warps"], config["num_stages"], bool(config["SCALE_IN"])
    bm = min(bm, max(16, triton.next_power_of_2(M)))
    if x.dtype == torch.float32:
        # Full-precision float32 dot products run on CUDA cores: keep the tiles small.
        bm, bn, bk, warps, stages = min(bm, 32), min(bn, 64), min(bk, 32), 4, min(stages, 2)
    if _INTERPRET or x.dtype == torch.float32 or not config.get("ASM", True):
        mode = _MODE_F32
    else:
        mode = _MODE_BF16 if x.dtype == torch.bfloat16 else _MODE_F16
    # The interpreter (triton 3.6) multiplies bf16 dot operands as their raw uint16 bits and truncates
    # float32 -> bf16 casts: there every dot runs in float32.
    dot_f32 = x.dtype == torch.float32 or _INTERPRET
    k_tiles = K // bk
    split = _even_split(k_tiles, config["SPLIT_K"])
    tiles = k_tiles // split
    ws = torch.empty((split, M, N), dtype=torch.float32, device=x.device) if split > 1 else y
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn), split)
    swap = bool(config.get("SWAP", False))
    kernel = _mma_swap_kernel if swap else _mma_kernel
    kernel[grid](
        x, packed, scale, zero, bias if bias is not None else scale, y, ws,
        M, N, K // 2 if swap else K // 8, K // group_size, x.stride(0), _loop_bound(tiles),
        GROUP=group_size, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=config["GROUP_M"], MODE=mode,
        SCALE_IN=scale_in, DOT_F32=dot_f32, EVEN_M=M % bm == 0, USE_WS=split > 1, HAS_BIAS=bias is not None,
        num_warps=warps, num_stages=stages)
    if split > 1:
        _finish_split(ws, bias, y, split)


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
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return y
    if config is None:
        if x.device.type == "cuda":
            from quantkit.kernels.tuning import get_config

            config = get_config(FAMILY, M, N, K, module=sys.modules[__name__],
                                bench=_bench_fn(x, weight_packed, weight_scale, weight_zero_point, bias, group_size))
        else:
            config = default_config(M, N, K)
    _check_config(config)
    if config["kernel"] == "gemv" and M <= _GEMV_MAX_M:
        _launch_gemv(x, weight_packed, weight_scale, weight_zero_point, bias, y, group_size, config)
    else:
        if config["kernel"] != "mma":
            config = _default_mma(M, N, K)
        _launch_mma(x, weight_packed, weight_scale, weight_zero_point, bias, y, group_size, config)
    return y
