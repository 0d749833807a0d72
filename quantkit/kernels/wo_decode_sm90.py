"""Weight-only decode (M <= 16) on the tensor cores, written in Gluon: y = x @ dequant(W)^T (+ bias), for
packed int4 (group-wise zero-points and scales) and int8 (one scale per row) weights.

Why. At decode sizes a layer's time is the time to stream its weight, so every SM must keep tens of KB
of weight in flight and convert it as fast as it arrives (int4 at 3 TB/s: ~26 weights a clock per
SM). The CUDA-core GEMVs convert and multiply each weight with float32 FMAs (int4: ~3 instructions a
weight). Here the weight goes from global memory straight into registers that *are* ``mma.sync`` A
fragments (no shared memory, no barrier in the loop), is converted there (int4: 13 instructions per 8
weights; int8: 8 per 4), and the tensor cores do the multiply-adds. Measured on an H100 the loop is
bound by load latency rather than issue (ncu: ~60 % of stall cycles wait on L1TEX), so what counts is
bytes in flight per warp and warps per SM (notes/int4_weight_only.md, round 6).

Layout games, all in registers (int4; int8 is the same with bytes for nibble pairs):

* A thread (lane 4·r + c) loads 16 contiguous bytes of a weight row per K chunk (``DK`` = 128 for
  int4, 64 for int8): physical columns [c·DK/4, (c + 1)·DK/4) of the chunk, rows r and r + 8 of each
  16-row tile. The chunk's K order is permuted, identically for the weight and for x, so that those
  codes are exactly this thread's A-fragment entries: code i = 4·jh + 2·jl + e of the thread's word ω
  is logical column 32·ω + 16·jh + 8·jl + 2·c + e (int8: byte j of word ω is 16·ω + 8·(j >> 1) + 2·c +
  (j & 1)), i.e. each k step's columns (2c, 2c + 1, 2c + 8, 2c + 9) of m16n8k16. A dot product is the
  same in any K order as long as both operands use it.
* x is loaded in the same physical order, as 32-bit column pairs: thread c holds x[c·DK/4 ..
  (c + 1)·DK/4) of its row(s), and the pairs are exactly its B-fragment registers (16-bit values
  carried through the loop would cost ptxas a PRMT each to re-pack).
* ``word_layout`` and ``x_layout`` say which elements each thread loads; ``join`` / ``permute`` /
  ``reshape`` rename them into the logical order, and ``convert_layout`` to the mma operand layouts
  moves no data (the CPU test compiles every candidate and checks for shared memory and shuffles).

int4 conversion of one 32-bit word (8 codes, 4 bytes): ``u = w >> 4``; per byte j, ``prmt`` puts byte j
of w in the low half and byte j of u in the high half, ``lop3`` keeps the low nibbles and ORs the magic
(bf16 128 / fp16 1024, whose last mantissa bit is 1) giving (magic + q0, magic + q1) exactly, and one
``sub`` of (magic + z) leaves (q0 - z, q1 - z) exactly. int8: ``prmt`` spreads a byte pair to the two
halves, two ``lop3`` and a ``sub`` make the exact signed values (:func:`_asm_i8_word`).

Numerics. int4 with group size >= DK: each chunk lies in one group, its float32 dot of the exact
integers q - z with x is scaled by s afterwards (float32-exact products; summation order and the tensor
cores' truncating accumulation within a chunk). int4 with group size < DK (32, 64 at DK = 128): the
weight is (q - z)·s rounded once to x.dtype in the conversion (one more ``mul``), as the reference's
weight cast to x.dtype, accumulated through K in float32. int8: exact products accumulated through K in
float32, times the row's scale, plus the bias, one rounding (as the other int8 weight-only kernels).

Parallelism without split-K (decode sizes allocate nothing but the output): a program owns BLOCK_N
= 16·MT·WM weight rows and WK·WM warps; a trip covers WK·SUB chunks (the batch dimension of a 3-D mma;
warp k takes chunks k + WK·i), the WM warps split the rows, and the partial sums are added once at the
end. The next trip's weights (and x, zero-points and scales; x at use when not ``XPF``) are loaded
before the current one is converted (two register buffers, the loop unrolled by two). The weight loads
are marked L1 evict-first: it is read once, and keeping it from displacing x, the zero-points and the
scales in L1 made the int4 kernel 13 % faster at 14336×4096 (an L2 evict-first policy on top changed
nothing; results/round6/probe_load_policy.log).

The weight loads also carry the L2 prefetch-size hint ``.L2::128B`` (``L2PF``: 128, the default, or 0 for
none; 256 measured no better). A lane group's 16-byte loads cover 64 bytes of a row per chunk (int4 at DK =
128, int8 at DK = 64), and the row's next 64 bytes belong to another warp or trip; with the hint an L2 miss
fetches the whole 128-byte line from DRAM at once. Outputs are unchanged. Measured on an H100
(notes/int4_weight_only.md, round 23; GPU µs, the same config without and with it): int4 14336×4096 M = 16
26.2 -> 24.7, M = 1 20.1 -> 19.7, 4096×14336 M = 16 29.7 -> 28.9; int8 14336×4096 M = 16 32.5 -> 31.7; the
DIAG programs (512 contiguous bytes a warp load already) unchanged. The 8-bit activation kernel
(:mod:`aq_decode_sm90`: 32 bytes a lane at DK = 128, whole lines) gained nothing from it (within 1 %) and
does not use it.

M = 1 on the mma's idle columns (``DIAG``). With one x row, seven of the n8 tile's eight columns would
multiply padding. A DIAG program gives them work instead: mma row i of a 16-row tile is chunk i % 8 (of the
slot's eight consecutive DK chunks) of weight row 2·tile + (i % 16) // 8, and mma column j is x's chunk j of
the same slot, so D[i, j] is the dot product of weight-row chunk i % 8 with x chunk j, and the diagonal j
= i % 8 is the wanted part; the epilogue keeps it and adds each row's eight. The lanes of one register then
load chunks 0-7 of one row: 512 contiguous bytes a warp load (rows are K / 2 bytes apart otherwise), from
the row-major weight. Same tensor-core work (the padding columns were computed anyway), 2·MT·WM rows a
program, eight times the distinct x bytes per lane group (from L1). Products and the float32 sums per chunk
are as in the plain kernel; only the order in which the chunks' sums meet changes. Measured on an H100
(sweep GPU time, notes/int8_weight_only.md, round 14): int8 weights 4096² 13.3 -> 12.8 µs, 14336×4096 29.0
-> 27.6, 4096×14336 29.3 -> 28.8; int4 4096×14336 22.0 -> 21.3 (elsewhere int4's x traffic, four times its
weight bytes, eats the gain); end to end, int8 weight-only decode b1 4.27 -> 4.02 ms a step. The same
holds at M = 2-4 with DG = 8 / M chunks a slot (M rounded up to a power of two): mma row i is chunk i % DG
of weight row i // DG, column j is chunk j % DG of x row j // DG, and the products with i % DG = j % DG are
kept (the kernel's ``DG``; 2·MT·WM·8 / DG rows a program). At M = 2-4 that ran the Llama shapes 6-35 %
(int8) and 5-23 % (int4) faster than the M = 16 configs they used before. A config's ``DG`` (2 or 4) caps
the chunks a slot below what M allows (:func:`diag_chunks`): shorter contiguous runs for fewer x chunks a
lane group. Measured on an H100 at M = 1-2 it was at most 2.4 % ahead of the shipped configs (int4) or
behind them (int8), so no tuned table uses it (notes/int4_weight_only.md, round 15).

Tiled weights (``TILED`` in the config; measured, not yet the layers' layout). The same bytes stored as
[N / 16, K / DK, 16 rows, one DK chunk of a row] (:func:`tile_weight`) make each warp's 16-byte loads
cover 512 contiguous bytes instead of 64 bytes of eight rows 2-14 KB apart; nothing else changes and the
outputs are bit-identical. On an H100 that made the kernel faster in all 84 probe cells (1-20 %, 4 % or more
in 77; int4 M = 1 at 14336×4096 19.9 -> 18.8 µs, 4096×14336 21.7 -> 20.4; int8 weights likewise;
notes/int4_weight_only.md, round 14). The layers keep the row-major layout that every other kernel of
the families reads (the GEMVs, the small-M and large-M GEMMs, the dequantization), so this is an option
of the kernel, not yet of a layer.

Requirements (:func:`usable`, :func:`usable_int8`): sm_90, x bf16/fp16 with unit stride along K, an
even row stride and 4-byte aligned rows, K a multiple of DK (int4: and of the group size, and a trip a
whole number of groups), weight rows contiguous and 16-byte aligned, int4 scales in x's dtype when the
group is smaller than DK. Rows past N re-read row N - 1 and rows past M re-read row M - 1 (never
stored); chunks past K read zeros for x.
"""
from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from quantkit.kernels.launch import cached
from quantkit.reference.common import ceil_div

_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


def _asm_word(fp16: bool, scale: bool) -> str:
    """PTX for one packed word -> 8 16-bit outputs ($0..$7: code i of the word, minus z (times s)).
    Inputs: $8 the word, $9 magic + z, $10 the scale (``scale`` only); see the module docstring."""
    magic, ty = ("0x64006400", "f16") if fp16 else ("0x43004300", "bf16")
    lines = ["{", ".reg .b32 u, t, zz, ss;", "mov.b32 zz, {$9, $9};", "shr.b32 u, $8, 4;"]
    if scale:
        lines.append("mov.b32 ss, {$10, $10};")
    for j in range(4):
        lines.append(f"prmt.b32 t, $8, u, 0x{4 + j}{4 + j}{j}{j};")
        lines.append(f"lop3.b32 t, t, 0x000f000f, {magic}, 0xea;")
        lines.append(f"sub.rn.{ty}x2 t, t, zz;")
        if scale:
            lines.append(f"mul.rn.{ty}x2 t, t, ss;")
        lines.append(f"mov.b32 {{${2 * j}, ${2 * j + 1}}}, t;")
    lines.append("}")
    return "\n".join(lines)


def _asm_i8_word(fp16: bool) -> str:
    """PTX for one word of 4 int8 weights -> 4 16-bit outputs ($0..$3: byte j's value, exactly; $4 the
    word): the pair conversion of ``wo_gemm_sm90._ASM_I8X2_TO_BF16X2`` / ``_F16X2`` on each half of the
    word. Per pair of bytes: ``prmt`` spreads them to the low bytes of the two halves (0x00b1_00b0);
    bf16 (7 mantissa bits): (0x4300 | b & 0x7f) - (0x4300 | b & 0x80) = b - 256·(b >> 7) = q; fp16:
    (0x6400 | b ^ 0x80) - 0x6480 = q. 4 instructions a pair, both subtractions exact."""
    lines = ["{", ".reg .b32 t, v, c;"]
    for pair, sel in ((0, "0x7170"), (1, "0x7372")):
        lines.append(f"prmt.b32 t, $4, 0, {sel};")
        if fp16:
            lines += ["lop3.b32 v, t, 0x00800080, 0x64006400, 0xbe;", "mov.b32 c, 0x64806480;",
                      "sub.rn.f16x2 t, v, c;"]
        else:
            lines += ["lop3.b32 v, t, 0x007f007f, 0x43004300, 0xea;", "lop3.b32 c, t, 0x00800080, 0x43004300, 0xea;",
                      "sub.rn.bf16x2 t, v, c;"]
        lines.append(f"mov.b32 {{${2 * pair}, ${2 * pair + 1}}}, t;")
    lines.append("}")
    return "\n".join(lines)


def _asm_load_words(vec: int, masked: bool) -> str:
    """PTX for one weight load of ``vec`` (2 or 4) consecutive words ($0.., from the address in the first
    input; the run's other word addresses follow it, unused), L1 evict-first as the plain load, with the L2
    prefetch-size hint ``.L2::128B``: on a miss L2 fetches the whole 128-byte line from DRAM, so the
    neighbouring chunk of the same row, which another warp or the next trip reads, arrives with it.
    ``masked``: the input after the addresses nonzero loads, else the words are zero."""
    outs = ", ".join(f"${i}" for i in range(vec))
    ld = f"ld.global.L1::evict_first.L2::128B.v{vec}.b32 {{{outs}}}, [${vec}];"
    if not masked:
        return ld
    zeros = "".join(f"mov.b32 ${i}, 0;\n" for i in range(vec))
    return f"{{\n.reg .pred p;\nsetp.ne.b32 p, ${2 * vec}, 0;\n{zeros}@p {ld}\n}}"


_ASM_LD2 = gl.constexpr(_asm_load_words(2, False))
_ASM_LD4 = gl.constexpr(_asm_load_words(4, False))
_ASM_LD2_MASKED = gl.constexpr(_asm_load_words(2, True))
_ASM_LD4_MASKED = gl.constexpr(_asm_load_words(4, True))


@gluon.jit
def _load_words(w_ptrs, mask, L2PF: gl.constexpr, MASKED: gl.constexpr):
    """int32 weight words at ``w_ptrs`` [B, BN, 4, WT] (each thread's WT words of a row slice consecutive
    in its registers and in memory: one 8- or 16-byte run, or several 16-byte ones), L1 evict-first;
    L2PF = 128 adds the L2 prefetch-size hint (:func:`_asm_load_words`), 0 is the plain load. MASKED:
    words where ``mask`` is false read as zeros."""
    WT: gl.constexpr = w_ptrs.shape[3]
    if L2PF == 0:
        if MASKED:
            return gl.load(w_ptrs, mask=mask, eviction_policy="evict_first")
        else:
            return gl.load(w_ptrs, eviction_policy="evict_first")
    elif WT == 2:
        if MASKED:
            return gl.inline_asm_elementwise(_ASM_LD2_MASKED, "=r,=r,l,l,r,r", [w_ptrs, mask.to(gl.int32)],
                                             dtype=gl.int32, is_pure=True, pack=2)
        else:
            return gl.inline_asm_elementwise(_ASM_LD2, "=r,=r,l,l", [w_ptrs], dtype=gl.int32, is_pure=True, pack=2)
    else:
        gl.static_assert(WT % 4 == 0, "a thread's words of a row slice: 2 or a multiple of 4")
        if MASKED:
            return gl.inline_asm_elementwise(_ASM_LD4_MASKED, "=r,=r,=r,=r,l,l,l,l,r,r,r,r",
                                             [w_ptrs, mask.to(gl.int32)], dtype=gl.int32, is_pure=True, pack=4)
        else:
            return gl.inline_asm_elementwise(_ASM_LD4, "=r,=r,=r,=r,l,l,l,l", [w_ptrs], dtype=gl.int32,
                                             is_pure=True, pack=4)


_ASM_I8_BF16 = gl.constexpr(_asm_i8_word(False))
_ASM_I8_F16 = gl.constexpr(_asm_i8_word(True))
_ASM_BF16 = gl.constexpr(_asm_word(False, False))
_ASM_BF16_SCALE = gl.constexpr(_asm_word(False, True))
_ASM_F16 = gl.constexpr(_asm_word(True, False))
_ASM_F16_SCALE = gl.constexpr(_asm_word(True, True))


# The renaming of the loaded values into the logical K order, as data (the CPU test applies the same
# permutations to physical column indices and checks the mma fragment columns and the x / weight match):
# int4 codes joined as [B, BN, c, ω, e, jl, jh] (code 4·jh + 2·jl + e of word ω of slice c) -> (ω, jh, jl, c, e);
# x columns split as [B, c, ω, jh, jl, e, BM] -> the same order; int8 bytes joined as [B, BN, c, ω, e, h]
# (byte 2·h + e) -> (ω, h, c, e), x [B, c, ω, h, e, BM] -> the same.
A_PERM_INT4 = gl.constexpr((0, 1, 3, 6, 5, 2, 4))
X_PERM_INT4 = gl.constexpr((0, 2, 3, 4, 1, 5, 6))
A_PERM_INT8 = gl.constexpr((0, 1, 3, 5, 2, 4))
X_PERM_INT8 = gl.constexpr((0, 2, 3, 1, 4, 5))


def _log2(v: int) -> int:
    assert v > 0 and v & (v - 1) == 0, v
    return v.bit_length() - 1


@functools.lru_cache(maxsize=None)
def word_layout(wk: int, wm: int, mt: int, wt: int, sub: int = 1) -> gl.DistributedLinearLayout:
    """int32 words [WK·SUB, 16·MT·WM, 4, WT] (chunk b of a trip, row, slice c, word; WT = DK / 32 for
    packed int4, DK / 16 for int8): warp (k, m) lane 4·r + c holds chunks k + WK·i (i < SUB) and, of rows
    16·WM·t + 16·m + r (+ 8) for t < MT, the WT consecutive words of slice c (registers first, so they
    load as one vector). Chunks and rows are placed as the mma v2 layout places its batch and rows."""
    reg = [[0, 0, 0, 1 << i] for i in range(_log2(wt))] + [[0, 8, 0, 0]]
    reg += [[0, 16 * wm << i, 0, 0] for i in range(_log2(mt))] + [[wk << i, 0, 0, 0] for i in range(_log2(sub))]
    lane = [[0, 0, 1, 0], [0, 0, 2, 0], [0, 1, 0, 0], [0, 2, 0, 0], [0, 4, 0, 0]]
    # warp ids as the mma layout numbers them: the WM row warps first, then the WK chunk warps (the other
    # order makes the conversion to the mma operands a shared-memory round trip when WM > 1)
    warp = [[0, 16 << i, 0, 0] for i in range(_log2(wm))] + [[1 << i, 0, 0, 0] for i in range(_log2(wk))]
    return gl.DistributedLinearLayout(reg_bases=reg, lane_bases=lane, warp_bases=warp, block_bases=[],
                                      shape=[wk * sub, 16 * mt * wm, 4, wt])


@functools.lru_cache(maxsize=None)
def x_layout(wk: int, wm: int, dk: int, bm: int, sub: int = 1) -> gl.DistributedLinearLayout:
    """x as 32-bit words (pairs of columns) [WK·SUB, DK / 2, BM] (chunk b of a trip, as in
    :func:`word_layout`), in physical order: lane 4·r + c holds
    the words of columns [c·DK/4, (c + 1)·DK/4) of rows r (and r + 8 when BM = 16); the WM warps of a K
    slice share them. Words, not 16-bit values, so that the pairs stay whole registers from the load
    to the mma (ptxas re-packs 16-bit values carried through the loop with a PRMT each)."""
    reg = [[0, 1 << i, 0] for i in range(_log2(dk // 8))] + ([[0, 0, 8]] if bm == 16 else [])
    reg += [[wk << i, 0, 0] for i in range(_log2(sub))]
    lane = [[0, dk // 8, 0], [0, dk // 4, 0], [0, 0, 1], [0, 0, 2], [0, 0, 4]]
    warp = [[0, 0, 0]] * _log2(wm) + [[1 << i, 0, 0] for i in range(_log2(wk))]  # as in word_layout
    return gl.DistributedLinearLayout(reg_bases=reg, lane_bases=lane, warp_bases=warp, block_bases=[],
                                      shape=[wk * sub, dk // 2, bm])


@gluon.jit
def _permute6(x, P: gl.constexpr):
    return gl.permute(x, (P[0], P[1], P[2], P[3], P[4], P[5]))


@gluon.jit
def _permute7(x, P: gl.constexpr):
    return gl.permute(x, (P[0], P[1], P[2], P[3], P[4], P[5], P[6]))


@gluon.jit
def _arange3(n: gl.constexpr, dim: gl.constexpr, layout: gl.constexpr):
    """arange(n) shaped to broadcast along ``dim`` of a rank-3 ``layout``."""
    if dim == 0:
        return gl.arange(0, n, layout=gl.SliceLayout(1, gl.SliceLayout(2, layout)))[:, None, None]
    elif dim == 1:
        return gl.arange(0, n, layout=gl.SliceLayout(0, gl.SliceLayout(2, layout)))[None, :, None]
    else:
        return gl.arange(0, n, layout=gl.SliceLayout(0, gl.SliceLayout(1, layout)))[None, None, :]


@gluon.jit
def _diag_sum(acc, DG: gl.constexpr):
    """The [B, BN, BM] accumulator summed over a trip's chunk slots; with DG > 1 (DIAG) only the products
    of matching chunks (mma row i % DG = column j % DG) are kept and each (weight row, x row)'s DG of them
    added: [BN / DG, BM / DG]. Shared with :mod:`quantkit.kernels.aq_decode_sm90`."""
    y = gl.sum(acc, axis=0)
    if DG > 1:
        BN: gl.constexpr = y.shape[0]
        BM: gl.constexpr = y.shape[1]
        YL: gl.constexpr = y.type.layout
        i_y = gl.arange(0, BN, layout=gl.SliceLayout(1, YL))
        j_y = gl.arange(0, BM, layout=gl.SliceLayout(0, YL))
        y = gl.where((j_y % DG)[None, :] == (i_y % DG)[:, None], y, 0)
        y = gl.sum(gl.sum(gl.reshape(y, [BN // DG, DG, BM // DG, DG]), axis=3), axis=1)
    return y


@gluon.jit
def _load_x(t, x_ptrs, wk_x, NUM_CHUNKS, TRIPS, B: gl.constexpr, DK: gl.constexpr, EVEN: gl.constexpr):
    """Trip t's x words (B: chunks a trip covers; wk_x: each word's chunk in the trip; chunks past K read
    as zeros)."""
    if EVEN:
        t = gl.minimum(t, TRIPS - 1)
        return gl.load(x_ptrs + t * (B * DK // 2))
    else:
        return gl.load(x_ptrs + t * (B * DK // 2), mask=gl.broadcast(t * B + wk_x < NUM_CHUNKS, x_ptrs)[0], other=0)


@gluon.jit
def _load_chunk(t, w_ptrs, x_ptrs, z_ptrs, s_ptrs, wk_w, wk_x, wk_z, wk_s, NUM_CHUNKS, TRIPS, B: gl.constexpr,
                DK: gl.constexpr, WPC: gl.constexpr, GROUP: gl.constexpr, EVEN: gl.constexpr, XPF: gl.constexpr,
                INT8: gl.constexpr, L2PF: gl.constexpr):
    """Trip t's loads (B chunks a trip; wk_*: each element's chunk in the trip): weight words, x words
    (XPF; else 0: loaded at use), zero-points and scales. EVEN (whole trips, an even count): no masks;
    the prefetch past the end, whose values are never used, reads the last trip again (L2 hits).
    Otherwise chunks past K read x and scales as zeros (their words and zero-points are finite whatever
    they are): they add nothing."""
    if XPF:
        xv = _load_x(t, x_ptrs, wk_x, NUM_CHUNKS, TRIPS, B, DK, EVEN)
    else:
        xv = 0
    if EVEN:
        t = gl.minimum(t, TRIPS - 1)
    w_ptrs = w_ptrs + t * (B * WPC)  # (WPC: the words from one chunk of a row to the next)
    # Read once: L1 evict-first keeps the weight from displacing x, zero-points and scales there.
    if EVEN:
        w = _load_words(w_ptrs, 0, L2PF, False)
    else:
        w = _load_words(w_ptrs, gl.broadcast(t * B + wk_w < NUM_CHUNKS, w_ptrs)[0], L2PF, True)
    if INT8:  # one scale per row, in the epilogue
        z = 0
        s = 0
    elif EVEN:
        z = gl.load(z_ptrs + t * (B * DK // GROUP))
        s = gl.load(s_ptrs + t * (B * DK // GROUP))
    else:
        z_ptrs = z_ptrs + t * (B * DK // GROUP)
        s_ptrs = s_ptrs + t * (B * DK // GROUP)
        z = gl.load(z_ptrs, mask=gl.broadcast(t * B + wk_z < NUM_CHUNKS, z_ptrs)[0])
        s = gl.load(s_ptrs, mask=gl.broadcast(t * B + wk_s < NUM_CHUNKS, s_ptrs)[0], other=0.0)
    return w, xv, z, s


@gluon.jit
def _int8_fragments(w, dtype: gl.constexpr, MMA: gl.constexpr):
    """int8 words [B, BN, 4, WT] -> the A operand [B, BN, 16·WT]: byte j of word (c, ω) is logical
    column 16·ω + 8·(j >> 1) + 2·c + (j & 1) (k step ω, register half j >> 1)."""
    B: gl.constexpr = w.shape[0]
    BN: gl.constexpr = w.shape[1]
    WT: gl.constexpr = w.shape[3]
    if dtype == gl.bfloat16:
        o = gl.inline_asm_elementwise(_ASM_I8_BF16, "=h,=h,=h,=h,r", [w], dtype=(gl.bfloat16, ) * 4, is_pure=True,
                                      pack=1)
    else:
        o = gl.inline_asm_elementwise(_ASM_I8_F16, "=h,=h,=h,=h,r", [w], dtype=(gl.float16, ) * 4, is_pure=True,
                                      pack=1)
    a = gl.join(gl.join(o[0], o[1]), gl.join(o[2], o[3]))  # [B, BN, c, ω, e, h]
    a = gl.reshape(_permute6(a, A_PERM_INT8), [B, BN, 16 * WT])
    return gl.convert_layout(a, gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2))


@gluon.jit
def _x_fragments(xv, dtype: gl.constexpr, MMA: gl.constexpr, INT8: gl.constexpr):
    """x words [B, DK / 2, BM] (physical column pairs) -> the B operand [B, DK, BM] in the weight's
    logical column order: physical column c·DK/4 + 8·ω + 4·jh + 2·jl + e (int4; int8: c·DK/4 + 4·ω +
    2·h + e) is the logical column the weight code at that position went to."""
    B: gl.constexpr = xv.shape[0]
    DK: gl.constexpr = 2 * xv.shape[1]
    BM: gl.constexpr = xv.shape[2]
    if dtype == gl.bfloat16:
        lo, hi = gl.inline_asm_elementwise("mov.b32 {$0, $1}, $2;", "=h,=h,r", [xv], dtype=(gl.bfloat16, gl.bfloat16),
                                           is_pure=True, pack=1)
    else:
        lo, hi = gl.inline_asm_elementwise("mov.b32 {$0, $1}, $2;", "=h,=h,r", [xv], dtype=(gl.float16, gl.float16),
                                           is_pure=True, pack=1)
    b = gl.permute(gl.join(lo, hi), (0, 1, 3, 2))  # [B, DK / 2, 2, BM]
    if INT8:
        b = gl.reshape(b, [B, 4, DK // 16, 2, 2, BM])
        b = gl.reshape(_permute6(b, X_PERM_INT8), [B, DK, BM])
    else:
        b = gl.reshape(b, [B, 4, DK // 32, 2, 2, 2, BM])
        b = gl.reshape(_permute7(b, X_PERM_INT4), [B, DK, BM])
    return gl.convert_layout(b, gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2))


@gluon.jit
def _chunk_product(acc, w, xv, z, s, dtype: gl.constexpr, MMA: gl.constexpr, SCALE_IN: gl.constexpr,
                   INT8: gl.constexpr):
    """acc += the chunk's product (module docstring): convert the words into the A fragments, rename x
    into the B fragments, one 3-D mma (int4 with groups >= DK: a fresh accumulator, then · s)."""
    if INT8:
        acc = mma_v2(_int8_fragments(w, dtype, MMA), _x_fragments(xv, dtype, MMA, True), acc)
    else:
        B: gl.constexpr = w.shape[0]
        BN: gl.constexpr = w.shape[1]
        WT: gl.constexpr = w.shape[3]
        DK: gl.constexpr = WT * 32
        BM: gl.constexpr = xv.shape[2]
        magic: gl.constexpr = 128.0 if dtype == gl.bfloat16 else 1024.0
        zm = gl.broadcast((z.to(gl.float32) + magic).to(dtype)[:, :, :, None], w)[0]
        if SCALE_IN:
            sb = gl.broadcast(s.to(dtype)[:, :, :, None], w)[0]
            if dtype == gl.bfloat16:
                o = gl.inline_asm_elementwise(_ASM_BF16_SCALE, "=h,=h,=h,=h,=h,=h,=h,=h,r,h,h", [w, zm, sb],
                                              dtype=(gl.bfloat16, ) * 8, is_pure=True, pack=1)
            else:
                o = gl.inline_asm_elementwise(_ASM_F16_SCALE, "=h,=h,=h,=h,=h,=h,=h,=h,r,h,h", [w, zm, sb],
                                              dtype=(gl.float16, ) * 8, is_pure=True, pack=1)
        else:
            if dtype == gl.bfloat16:
                o = gl.inline_asm_elementwise(_ASM_BF16, "=h,=h,=h,=h,=h,=h,=h,=h,r,h", [w, zm],
                                              dtype=(gl.bfloat16, ) * 8, is_pure=True, pack=1)
            else:
                o = gl.inline_asm_elementwise(_ASM_F16, "=h,=h,=h,=h,=h,=h,=h,=h,r,h", [w, zm],
                                              dtype=(gl.float16, ) * 8, is_pure=True, pack=1)
        # code i = 4·jh + 2·jl + e of word (c, ω) -> logical column 32·ω + 16·jh + 8·jl + 2·c + e
        q0 = gl.join(gl.join(o[0], o[1]), gl.join(o[2], o[3]))  # [.., c, ω, e, jl] for jh = 0
        q1 = gl.join(gl.join(o[4], o[5]), gl.join(o[6], o[7]))
        a = gl.join(q0, q1)  # [B, BN, c, ω, e, jl, jh]
        a = gl.reshape(_permute7(a, A_PERM_INT4), [B, BN, DK])
        a = gl.convert_layout(a, gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2))
        b = _x_fragments(xv, dtype, MMA, False)
        if SCALE_IN:
            acc = mma_v2(a, b, acc)
        else:
            part = mma_v2(a, b, gl.zeros([B, BN, BM], gl.float32, MMA))
            acc = acc + part * s.to(gl.float32)[:, :, None]
    return acc


@gluon.jit
def _decode_kernel(x_ptr, w_ptr, s_ptr, z_ptr, b_ptr, y_ptr, M, N, KW, G, stride_xm, NUM_CHUNKS, TRIPS,
                   INT8: gl.constexpr, GROUP: gl.constexpr, DK: gl.constexpr, BM: gl.constexpr, MT: gl.constexpr,
                   WK: gl.constexpr, WM: gl.constexpr, SUB: gl.constexpr, XPF: gl.constexpr, SCALE_IN: gl.constexpr,
                   HAS_BIAS: gl.constexpr, EVEN: gl.constexpr, W_LAYOUT: gl.constexpr, X_LAYOUT: gl.constexpr,
                   num_warps: gl.constexpr, TILED: gl.constexpr = False, DG: gl.constexpr = 1,
                   L2PF: gl.constexpr = 128):
    """Y^T tile [16·MT·WM rows of W, BM rows of x] over all of K (module docstring). INT8: int8 weights
    [N, K] with one scale per row (z_ptr and G unused); else packed int4 [N, K / 2] with group-wise
    zero-points and scales. DG > 1 (DIAG, M <= 8 / DG): mma row i is chunk i % DG of weight row i // DG of
    the program's BN / DG, mma column j is chunk j % DG of x row j // DG, and only the products with
    i % DG = j % DG are kept (module docstring)."""
    BN: gl.constexpr = 16 * MT * WM
    B: gl.constexpr = WK * SUB  # chunk slots per trip (DG chunks a slot)
    CPT: gl.constexpr = DG * B  # chunks per trip
    RP: gl.constexpr = BN // DG  # weight rows per program
    XR: gl.constexpr = BM // DG  # x rows per program
    WT: gl.constexpr = DK // 16 if INT8 else DK // 32  # words per thread, row and chunk
    WPC: gl.constexpr = 4 * WT  # words per row and chunk
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[WK, WM, 1], instr_shape=[1, 16, 8])
    ZL: gl.constexpr = gl.SliceLayout(3, W_LAYOUT)  # [B, BN, 4]: per row and slice c
    SL: gl.constexpr = gl.SliceLayout(2, MMA)  # [B, BN]: per row
    pid_n = gl.program_id(0)
    pid_m = gl.program_id(1)
    w_ptr = w_ptr.to(gl.pointer_type(gl.int32))  # the weight's bytes as words [N, KW]

    # words: row·KW + chunk·WPC + c·WT + ω
    wk3 = _arange3(B, 0, ZL)
    c3 = _arange3(4, 2, ZL)
    i3 = _arange3(BN, 1, ZL)
    rows3 = gl.minimum(pid_n * RP + i3 // DG, N - 1)
    wk3 = wk3 * DG + i3 % DG  # the chunk (in the trip) of each row slot
    om = gl.arange(0, WT, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, W_LAYOUT))))
    CW: gl.constexpr = 16 * WPC if TILED else WPC  # words from one chunk of a row to the next
    if TILED:  # [N / 16, chunks, 16 rows, WPC words]: a warp's load is 512 contiguous bytes
        w_ptrs = (w_ptr + ((rows3 // 16).to(gl.int64) * (16 * KW) + wk3 * CW + (rows3 % 16) * WPC
                           + c3 * WT)[:, :, :, None] + om[None, None, None, :])
    else:
        w_ptrs = (w_ptr + (rows3.to(gl.int64) * KW + wk3 * WPC + c3 * WT)[:, :, :, None]
                  + om[None, None, None, :])
    wk_w = wk3[:, :, :, None]
    # int4: zero-points (and SCALE_IN scales) per row and slice c; scales after the mma per row
    if INT8:
        z_ptrs = 0
        s_ptrs = 0
        wk_s = 0
    else:
        z_ptrs = z_ptr + rows3 * G + (wk3 * DK + c3 * (DK // 4)) // GROUP  # [B, BN, 4]
        if SCALE_IN:
            s_ptrs = s_ptr + rows3 * G + (wk3 * DK + c3 * (DK // 4)) // GROUP
            wk_s = wk3
        else:
            i_s = gl.arange(0, BN, layout=gl.SliceLayout(0, SL))
            wk_s = gl.arange(0, B, layout=gl.SliceLayout(1, SL))[:, None]
            rows_s = gl.minimum(pid_n * RP + i_s // DG, N - 1)
            wk_s = wk_s * DG + (i_s % DG)[None, :]
            s_ptrs = s_ptr + (rows_s * G)[None, :] + (wk_s * DK) // GROUP  # [B, BN]
    # x: row m, column chunk·DK + kp
    wkc = _arange3(B, 0, X_LAYOUT)
    kp = _arange3(DK // 2, 1, X_LAYOUT)
    m3 = _arange3(BM, 2, X_LAYOUT)  # mma column j: chunk j % DG of x row j // DG
    # Rows past M read row M - 1: they only make output columns that are never stored.
    xm = gl.minimum(pid_m * XR + m3 // DG, M - 1)
    wkc = wkc * DG + m3 % DG
    x_words = x_ptr.to(gl.pointer_type(gl.int32))  # column pairs
    x_ptrs = x_words + xm.to(gl.int64) * (stride_xm // 2) + wkc * (DK // 2) + kp

    acc = gl.zeros([B, BN, BM], gl.float32, MMA)
    dtype: gl.constexpr = x_ptr.dtype.element_ty
    # Two buffers, the loop unrolled by two: the loads of trip t + 1 are issued before trip t is
    # converted, and no register is copied from one buffer to the other (an odd trip count runs one
    # masked trip: zeros in, nothing added).
    w0, x0, z0, s0 = _load_chunk(0, w_ptrs, x_ptrs, z_ptrs, s_ptrs, wk_w, wkc, wk3, wk_s, NUM_CHUNKS, TRIPS, CPT,
                                 DK, CW, GROUP, EVEN, XPF, INT8, L2PF)
    for t in range(0, TRIPS, 2):
        w1, x1, z1, s1 = _load_chunk(t + 1, w_ptrs, x_ptrs, z_ptrs, s_ptrs, wk_w, wkc, wk3, wk_s, NUM_CHUNKS, TRIPS,
                                     CPT, DK, CW, GROUP, EVEN, XPF, INT8, L2PF)
        if XPF:
            xa = x0
        else:
            xa = _load_x(t, x_ptrs, wkc, NUM_CHUNKS, TRIPS, CPT, DK, EVEN)
        acc = _chunk_product(acc, w0, xa, z0, s0, dtype, MMA, SCALE_IN, INT8)
        w0, x0, z0, s0 = _load_chunk(t + 2, w_ptrs, x_ptrs, z_ptrs, s_ptrs, wk_w, wkc, wk3, wk_s, NUM_CHUNKS, TRIPS,
                                     CPT, DK, CW, GROUP, EVEN, XPF, INT8, L2PF)
        if XPF:
            xb = x1
        else:
            xb = _load_x(t + 1, x_ptrs, wkc, NUM_CHUNKS, TRIPS, CPT, DK, EVEN)
        acc = _chunk_product(acc, w1, xb, z1, s1, dtype, MMA, SCALE_IN, INT8)

    y = _diag_sum(acc, DG)  # [RP, XR]
    OL: gl.constexpr = y.type.layout
    offs_n = pid_n * RP + gl.arange(0, RP, layout=gl.SliceLayout(1, OL))
    offs_m = pid_m * XR + gl.arange(0, XR, layout=gl.SliceLayout(0, OL))
    if INT8:
        y = y * gl.load(s_ptr + offs_n, mask=offs_n < N, other=0.0).to(gl.float32)[:, None]
    if HAS_BIAS:
        y = y + gl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(gl.float32)[:, None]
    ptrs = y_ptr + offs_m.to(gl.int64)[None, :] * N + offs_n[:, None]
    gl.store(ptrs, y.to(y_ptr.dtype.element_ty), mask=(offs_n < N)[:, None] & (offs_m < M)[None, :])

_decode_fast = cached(_decode_kernel)


@functools.lru_cache(maxsize=None)
def _is_sm90(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] == 9


def _x_ok(x: torch.Tensor, dk: int) -> bool:
    """x read as 32-bit column pairs: unit stride along K, rows starting 4-byte aligned, K % DK == 0."""
    return (x.is_cuda and x.dtype in _GL_DTYPES and _is_sm90(x.device.index or 0) and x.stride(1) == 1
            and x.stride(0) % 2 == 0 and x.data_ptr() % 4 == 0 and x.shape[1] % dk == 0)


def usable(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, group_size: int, cfg: dict) -> bool:
    """Whether the int4 kernel takes the problem with ``cfg`` (module docstring's requirements)."""
    K = x.shape[1]
    dk, per_trip = int(cfg["DK"]), int(cfg["WK"]) * int(cfg.get("SUB", 1))
    return (_x_ok(x, dk) and K % group_size == 0 and (per_trip * dk) % group_size == 0 and packed.is_contiguous()
            and packed.data_ptr() % 16 == 0 and (not scale_in(cfg, group_size) or scale.dtype == x.dtype))


def usable_int8(x: torch.Tensor, weight_q: torch.Tensor, cfg: dict) -> bool:
    """Whether the int8 kernel takes the problem with ``cfg``."""
    return _x_ok(x, int(cfg["DK"])) and weight_q.is_contiguous() and weight_q.data_ptr() % 16 == 0


def tile_weight(w: torch.Tensor, chunk_bytes: int) -> torch.Tensor:
    """The bytes of a row-major weight [N, Kb] (packed int4, int8 or fp8 codes) rearranged as [N / 16,
    Kb / chunk_bytes, 16, chunk_bytes] (16-row tiles, one K chunk of each row after the other), returned
    as a new contiguous [N, Kb] tensor of the same dtype: the layout a ``TILED`` decode config reads
    (chunk_bytes = DK / 2 for packed int4, DK for 8-bit codes)."""
    n, kb = w.shape
    if n % 16 or kb % chunk_bytes:
        raise ValueError(f"tile_weight: {n} rows must be a multiple of 16 and {kb} bytes a row a multiple of "
                         f"{chunk_bytes}")
    return w.reshape(n // 16, 16, kb // chunk_bytes, chunk_bytes).permute(0, 2, 1, 3).contiguous().view(n, kb)


def diag_chunks(cfg: dict, M: int) -> int:
    """DG, the chunks of a row a slot for a decode config at M rows (both decode kernels): with ``DIAG``,
    as many as the x tile's idle columns allow (8 at M = 1, 4 at M = 2, 2 at M = 3-4), or the config's
    ``DG`` (a power of two, 2-8) where that is fewer; else 1. A smaller DG reads DG·DK/2 (int4) contiguous
    bytes of 8 / DG rows a warp load, and 1/DG as many x chunks per lane group as DG = 8 / M."""
    dg = 8 // (1 << (M - 1).bit_length()) if cfg.get("DIAG") and 1 <= M <= 4 else 1
    if "DG" in cfg:
        want = cfg["DG"]
        if isinstance(want, bool) or not isinstance(want, int) or want not in (2, 4, 8) or not cfg.get("DIAG"):
            raise ValueError(f"decode config DG must be 2, 4 or 8 and come with DIAG: {cfg!r}")
        dg = min(dg, want)
    if dg > 1 and cfg.get("TILED"):
        raise ValueError(f"a decode config is DIAG or TILED, not both: {cfg!r}")
    return dg


def _launch(x, w, scale, zero, bias, out, group_size: int, cfg: dict, int8: bool) -> None:
    M, K = x.shape
    N = w.shape[0]
    for key in ("XPF", "DIAG", "TILED", "SCALE_IN"):  # tuned tables are JSON: 1 or "true" must not pass for True
        if not isinstance(cfg.get(key, False), bool):
            raise ValueError(f"decode config {key} must be true or false: {cfg!r}")
    maxnreg = cfg.get("MAXNREG")
    if maxnreg is not None and (isinstance(maxnreg, bool) or not isinstance(maxnreg, int)
                                or not 64 <= maxnreg <= 255 or maxnreg % 8):
        raise ValueError(f"decode config MAXNREG must be a multiple of 8 in 64..255: {cfg!r}")
    if cfg.get("TILED") and N % 16:
        raise ValueError(f"a TILED decode config reads 16-row tiles: N = {N} is not a multiple of 16")
    l2pf = l2_prefetch(cfg)
    mt, wk, wm, dk = int(cfg["MT"]), int(cfg["WK"]), int(cfg["WM"]), int(cfg["DK"])
    sub, xpf = int(cfg.get("SUB", 1)), bool(cfg.get("XPF", True))
    dg = diag_chunks(cfg, M)
    bm = 8 if M <= 8 else 16
    chunks = K // dk
    per_trip = wk * sub * dg
    rows = 16 * mt * wm // dg
    wt = dk // 16 if int8 else dk // 32
    _decode_fast[(ceil_div(N, rows), ceil_div(M, bm // dg))](
        x, w, scale, zero if zero is not None else scale, bias if bias is not None else scale, out,
        M, N, K // 4 if int8 else K // 8, K // group_size, x.stride(0), chunks, ceil_div(chunks, per_trip),
        INT8=int8, GROUP=group_size, DK=dk, BM=bm, MT=mt, WK=wk, WM=wm, SUB=sub, XPF=xpf,
        SCALE_IN=scale_in(cfg, group_size, int8), HAS_BIAS=bias is not None, EVEN=chunks % (2 * per_trip) == 0,
        W_LAYOUT=word_layout(wk, wm, mt, wt, sub), X_LAYOUT=x_layout(wk, wm, dk, bm, sub), num_warps=wk * wm,
        TILED=bool(cfg.get("TILED", False)), DG=dg, L2PF=l2pf, **({"maxnreg": maxnreg} if maxnreg else {}))


def l2_prefetch(cfg: dict) -> int:
    """A decode config's ``L2PF``: the L2 prefetch size of its weight loads in bytes, 128 (the default), or 0
    for the plain load without the hint (module docstring)."""
    v = cfg.get("L2PF", 128)
    if isinstance(v, bool) or v not in (0, 128):
        raise ValueError(f"decode config L2PF must be 0 or 128: {cfg!r}")
    return int(v)


def scale_in(cfg: dict, group_size: int, int8: bool = False) -> bool:
    """Whether an int4 decode launch multiplies by the weight (q - z)·s rounded once to x.dtype (groups
    smaller than a DK chunk, or the config's ``SCALE_IN``), rather than by the exact q - z with the float32
    product of each chunk scaled afterwards. ``SCALE_IN`` has the numerics of the Gluon GEMM and of
    ``dequant_mm`` and drops the per-chunk float32 accumulator: 255 -> 181 registers at MT 4 with 16 x rows."""
    return not int8 and (group_size < int(cfg["DK"]) or bool(cfg.get("SCALE_IN", False)))


def launch(x, packed, scale, zero, bias, out, group_size: int, cfg: dict) -> None:
    """``out = x @ dequant(packed, scale, zero)^T (+ bias)`` for M <= 16 (``cfg``: MT, WK, WM, DK, SUB,
    XPF; optional DIAG, used at M <= 4, and TILED, for weights rearranged by :func:`tile_weight`;
    SCALE_IN (:func:`scale_in`); MAXNREG, a cap on registers a thread for ptxas; L2PF
    (:func:`l2_prefetch`))."""
    _launch(x, packed, scale, zero, bias, out, group_size, cfg, False)


def launch_int8(x, weight_q, weight_scale, bias, out, cfg: dict) -> None:
    """``out = (x @ weight_q^T) · weight_scale (+ bias)`` for M <= 16, int8 weights [N, K] (``cfg`` as
    :func:`launch`)."""
    _launch(x, weight_q, weight_scale, None, bias, out, 1, cfg, True)  # no groups (GROUP unused: 1, not K,
    # so that layers of different K share one compilation)
