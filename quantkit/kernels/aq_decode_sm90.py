"""Decode sizes (M <= 16, and up to MAX_M = 64 in x tiles of 16) for the recipes that quantize activations,
on the tensor cores, written in Gluon:
8-bit x codes times 8-bit weight codes with ``mma.sync`` m16n8k32, for int8 dynamic (s8 × s8 -> s32,
one scale per token and per output channel) and fp8 block-wise (e4m3 × e4m3 -> f32, one scale per
1×G x group and per G×G weight block).

Why. At decode sizes a layer's time is the time to stream its weight, and the fused kernels of
:mod:`quantkit.kernels.fp8_block` and :mod:`quantkit.kernels.int8_dynamic` re-quantize the x rows in
every program: with N / 16-64 programs that multiplies the quantization (~8 instructions per x element)
by 64-256. Here x is quantized once, by the families' own quantization kernels, into a workspace that
shares the output's allocation; this kernel is launched with programmatic dependent launch (PDL), so
its programs are resident and issue their first weight loads while the quantization runs, and wait for
it (``griddepcontrol.wait``) before they read x.

Layout games, all in registers (the same idea as :mod:`quantkit.kernels.wo_decode_sm90`, simpler: 8-bit
operands need no conversion). The m16n8k32 A fragment of lane 4·r + c is four 32-bit registers: rows r
and r + 8, columns 4c..4c+3 and 16 + 4c..16 + 4c + 3 of a 32-deep k step; the B fragment is two
registers, the same columns of x row r. A thread loads DK / 4 contiguous bytes (16 at DK = 64, 32 at
DK = 128) of a weight row per DK-deep K chunk: physical bytes [c·DK/4, (c + 1)·DK/4) of the chunk, and
the chunk's K order is permuted so that byte j of its word ω = 2s + h is logical column 32s + 16h + 4c +
j — each loaded word *is* a fragment register (``reshape`` / ``permute`` rename, ``convert_layout``
to the mma operand moves no data; the CPU test compiles every candidate and checks for shared memory
and shuffles). x codes are loaded the same way (16-32 contiguous bytes of x row r), so both operands
agree on the permuted order and the dot product is unchanged.

Numerics. int8: the products and their int32 sums are exact (|sum| <= 127²·K < 2³¹ for K < 133,000),
so the result is bit-identical to the other int8-dynamic kernels: y = (f32(Σ) · x_scale) · w_scale
(+ bias), one rounding each, no fused multiply-add. fp8: ptxas runs the e4m3 mma on sm_90 as two f16
HMMAs (every e4m3 value is exact in f16, products exact in f32); each chunk lies in one scale group
(DK divides G), and its f32 dot is scaled by x_scale · w_scale and added to the chunk slot's running
sum (ptxas contracts it to an FMA). A group is thus scaled per DK-chunk and summed over WK·SUB slots:
another order of float32 roundings than the family's Triton kernels, within the same bound (tests).

Parallelism without split-K: a program owns BN = 16·MT·WM weight rows (one G-row scale block) and
WK·WM warps; a trip covers WK·SUB chunks (the batch dimension of a 3-D mma; warp k takes chunks
k + WK·i), the WM warps split the rows, and the partial sums are added once at the end. The next trip's
loads are issued before the current one's mma (two register buffers, the loop unrolled by two); the
weight loads are L1 evict-first (read once).

DIAG at M <= 4 (``DG`` = 8 / M chunks of a row a slot, M rounded up to a power of two), as in
:mod:`quantkit.kernels.wo_decode_sm90`: the x tile's idle columns take more chunks of each row, so a warp
load reads DG·DK contiguous bytes from each of 8 / DG rows. fp8: the products of matching chunks carry the
right scale product (x_scale · w_scale of that chunk's group: a function of the column), the others are
dropped. At M = 2-4 the sweeps picked it in 18 of 20 cells, 2-8 % ahead of the plain decode default on the
Llama shapes and 16-21 % at 1024×4096 (notes/fp8_block.md, round 14).

x at use (``XPF`` false in a config; default true). The x codes and scale products of a trip are loaded right
before its mma instead of a trip ahead: the same loads later, the same outputs, and one register buffer fewer
(fp8 at BM = 16: 138 registers instead of 196 at MT 1 / WK 4, 207 instead of 249 at MT 2 / WK 2 / WM 2). On an
H100 that made fp8 14336×4096 M = 16 3.9 % faster (and 9 % on an H200), and other cells up to 8.9 % slower
(notes/fp8_block.md, round 25). The freed buffer is what lets a warp take two chunks a trip (``SUB`` 2): fp8 at
MT 1 / WK 4 / DK 128 then compiles to 210 registers without spills (255 and 1,192 bytes of spill stores with x a
trip ahead) and ran 4096² and 4096×14336 at M = 16 5-9 % faster on an H100 (int8: within ±1 %; round 27).

Tiled weights (``TILED``, as in :mod:`quantkit.kernels.wo_decode_sm90`; :func:`wo_decode_sm90.tile_weight`
with DK-byte chunks): 16-row tiles make a warp's loads contiguous. Measured on an H100 at M = 16: 1-5 %
faster for the shipped configs (fp8 4096² 16.6 -> 16.2 µs), bit-identical; not yet the layers' layout.

Requirements (:func:`usable`): sm_90; K a positive multiple of DK (fp8: DK divides G, BN <= G); the
weight contiguous and 16-byte aligned. The x codes need a 16-byte aligned base and row stride (the
families' workspace pads its rows to 16; ``fp8_block.gemm`` checks codes it is given).
Rows past N re-read row N - 1, rows past M re-read row M - 1 (never stored); chunks past the last read
as zeros (an odd trip count).
"""
from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from quantkit.kernels.configs import is_pow2
from quantkit.kernels.launch import cached
from quantkit.kernels.wo_decode_sm90 import _arange3, _diag_sum, _is_sm90, _log2, diag_chunks
from quantkit.reference.common import ceil_div

# Loaded bytes [B, R, c, s, h, j] (byte 4·(2s + h) + j of slice c) -> logical order (s, h, c, j):
# column 32s + 16h + 4c + j of the chunk (the CPU test applies this to physical column indices).
K_PERM = gl.constexpr((0, 1, 3, 4, 2, 5))


@functools.lru_cache(maxsize=None)
def operand_layout(wk: int, wm: int, rows: int, dk: int, sub: int = 1, weight: bool = True) -> gl.DistributedLinearLayout:
    """Bytes [WK·SUB, ROWS, 4, DK / 4] (chunk b of a trip, row, slice c, byte): warp (k, m) lane 4·r + c
    holds chunks k + WK·i (i < SUB), and the DK / 4 bytes of slice c (registers first: one or two
    16-byte loads) of rows r (+ 8) of each 16-row tile. ``weight``: ROWS = 16·MT·WM rows, warp m
    takes rows 16·WM·t + 16·m + r (as the mma layout places them); else x's ROWS = BM (8 or 16) rows,
    shared by the WM warps of a K slice."""
    reg = [[0, 0, 0, 1 << i] for i in range(_log2(dk // 4))]
    if weight:
        mt = rows // (16 * wm)
        reg += [[0, 8, 0, 0]] + [[0, 16 * wm << i, 0, 0] for i in range(_log2(mt))]
        warp_m = [[0, 16 << i, 0, 0] for i in range(_log2(wm))]
    else:
        reg += [[0, 8, 0, 0]] if rows == 16 else []
        warp_m = [[0, 0, 0, 0]] * _log2(wm)
    reg += [[wk << i, 0, 0, 0] for i in range(_log2(sub))]
    lane = [[0, 0, 1, 0], [0, 0, 2, 0], [0, 1, 0, 0], [0, 2, 0, 0], [0, 4, 0, 0]]
    # warp ids as the mma layout numbers them: the WM row warps first, then the WK chunk warps
    warp = warp_m + [[1 << i, 0, 0, 0] for i in range(_log2(wk))]
    return gl.DistributedLinearLayout(reg_bases=reg, lane_bases=lane, warp_bases=warp, block_bases=[],
                                      shape=[wk * sub, rows, 4, dk // 4])


@gluon.jit
def _logical(v):
    """Loaded bytes [B, R, 4, DK / 4] -> [B, R, DK] in the logical K order (module docstring)."""
    B: gl.constexpr = v.shape[0]
    R: gl.constexpr = v.shape[1]
    DK: gl.constexpr = 4 * v.shape[3]
    v = gl.reshape(v, [B, R, 4, DK // 32, 2, 4])
    v = gl.permute(v, (K_PERM[0], K_PERM[1], K_PERM[2], K_PERM[3], K_PERM[4], K_PERM[5]))
    return gl.reshape(v, [B, R, DK])


@gluon.jit
def _grid_wait():
    """Programmatic dependent launch: block until the previous grid (the quantization) has completed
    and its writes are visible. A no-op when the launch was not programmatic."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _load_w(t, w_ptrs, wk_w, NUM_CHUNKS, TRIPS, B: gl.constexpr, CW: gl.constexpr, EVEN: gl.constexpr):
    """Trip t's weight bytes. EVEN (whole trips, an even count): no masks, the prefetch past the end
    reads the last trip again (L2 hits, never used); otherwise chunks past K read zeros."""
    if EVEN:
        t = gl.minimum(t, TRIPS - 1)
        return gl.load(w_ptrs + t * (B * CW), eviction_policy="evict_first")
    else:
        return gl.load(w_ptrs + t * (B * CW), mask=gl.broadcast(t * B + wk_w < NUM_CHUNKS, w_ptrs)[0], other=0.0,
                       eviction_policy="evict_first")


@gluon.jit
def _load_x(t, x_ptrs, wk_x, xs_ptrs, ws_ptrs, wk_s, NUM_CHUNKS, TRIPS, B: gl.constexpr, DK: gl.constexpr,
            GROUP: gl.constexpr, stride_xsg, stride_wsg, FP8: gl.constexpr, EVEN: gl.constexpr):
    """Trip t's x codes and (fp8) the chunks' scale products x_scale · w_scale [B, BM]."""
    if EVEN:
        t = gl.minimum(t, TRIPS - 1)
        xv = gl.load(x_ptrs + t * (B * DK))
    else:
        xv = gl.load(x_ptrs + t * (B * DK), mask=gl.broadcast(t * B + wk_x < NUM_CHUNKS, x_ptrs)[0], other=0.0)
    if FP8:
        g = ((t * B + wk_s) * DK) // GROUP  # [B, 1]: the chunk's scale group
        if EVEN:
            sc = gl.load(xs_ptrs + g * stride_xsg) * gl.load(ws_ptrs + g * stride_wsg)
        else:
            ok = t * B + wk_s < NUM_CHUNKS
            sc = (gl.load(xs_ptrs + g * stride_xsg, mask=gl.broadcast(ok, xs_ptrs)[0], other=0.0)
                  * gl.load(ws_ptrs + g * stride_wsg, mask=ok, other=0.0))
    else:
        sc = 0
    return xv, sc


@gluon.jit
def _chunk_product(acc, wv, xv, sc, MMA: gl.constexpr, FP8: gl.constexpr):
    """acc += the trip's products: the loaded bytes renamed into the mma operands, one 3-D mma; fp8:
    into a fresh float32 accumulator, then · x_scale · w_scale per chunk."""
    a = gl.convert_layout(_logical(wv), gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=4))
    b = gl.convert_layout(gl.permute(_logical(xv), (0, 2, 1)),
                          gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=4))
    if FP8:
        part = mma_v2(a, b, gl.zeros(acc.shape, gl.float32, MMA))
        acc = acc + part * sc[:, None, :]
    else:
        acc = mma_v2(a, b, acc)
    return acc


@gluon.jit
def _decode8_kernel(xq_ptr, xs_ptr, w_ptr, ws_ptr, b_ptr, y_ptr, M, N, K, stride_xq, stride_xsm, stride_xsg,
                    stride_wsn, stride_wsg, stride_ym, NUM_CHUNKS, TRIPS,
                    FP8: gl.constexpr, GROUP: gl.constexpr, DK: gl.constexpr, BM: gl.constexpr, MT: gl.constexpr,
                    WK: gl.constexpr, WM: gl.constexpr, SUB: gl.constexpr, HAS_BIAS: gl.constexpr,
                    EVEN: gl.constexpr, WAIT_PRIOR: gl.constexpr, W_LAYOUT: gl.constexpr, X_LAYOUT: gl.constexpr,
                    num_warps: gl.constexpr, TILED: gl.constexpr = False, DG: gl.constexpr = 1,
                    XPF: gl.constexpr = True):
    """Y^T tile [BN = 16·MT·WM rows of W, BM rows of x] over all of K (module docstring). int8: scales
    x_scale[m] (stride_xsm) and w_scale[n]; fp8: x_scale[m, g] (stride_xsm, stride_xsg) and
    w_scale[n / G, g] (stride_wsn, stride_wsg). DG > 1 (DIAG, M <= 8 / DG): mma row i is chunk i % DG of
    weight row i // DG, column j chunk j % DG of x row j // DG; the products of matching chunks are kept
    (as in :mod:`quantkit.kernels.wo_decode_sm90`). XPF: x codes and scales loaded a trip ahead like the
    weight (else at use, which frees their second register buffer)."""
    BN: gl.constexpr = 16 * MT * WM
    B: gl.constexpr = WK * SUB  # chunk slots per trip (DG chunks a slot)
    CPT: gl.constexpr = DG * B  # chunks per trip
    RP: gl.constexpr = BN // DG  # weight rows per program
    XR: gl.constexpr = BM // DG  # x rows per program
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[WK, WM, 1], instr_shape=[1, 16, 8])
    WL: gl.constexpr = gl.SliceLayout(3, W_LAYOUT)  # [B, BN, 4]
    XL: gl.constexpr = gl.SliceLayout(3, X_LAYOUT)  # [B, BM, 4]
    SL: gl.constexpr = gl.SliceLayout(1, MMA)  # [B, BM]: per chunk and x row
    # x tiles fastest: the programs that share a weight tile run side by side (one HBM read of it)
    num_m = gl.cdiv(M, XR)
    pid_m = gl.program_id(0) % num_m
    pid_n = gl.program_id(0) // num_m

    # weight byte: row·K + chunk·DK + c·DK/4 + j
    i3 = _arange3(BN, 1, WL)
    rows = gl.minimum(pid_n * RP + i3 // DG, N - 1)
    wk_w = _arange3(B, 0, WL) * DG + i3 % DG  # the chunk (in the trip) of each row slot
    jw = gl.arange(0, DK // 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, W_LAYOUT))))
    CW: gl.constexpr = 16 * DK if TILED else DK  # bytes from one chunk of a row to the next
    if TILED:  # [N / 16, chunks, 16 rows, DK bytes]: a warp's load is 512 contiguous bytes
        w_ptrs = (w_ptr + ((rows // 16).to(gl.int64) * (16 * K) + wk_w * CW + (rows % 16) * DK
                           + _arange3(4, 2, WL) * (DK // 4))[:, :, :, None] + jw[None, None, None, :])
    else:
        w_ptrs = (w_ptr + (rows.to(gl.int64) * K + wk_w * DK + _arange3(4, 2, WL) * (DK // 4))[:, :, :, None]
                  + jw[None, None, None, :])
    wk_w = wk_w[:, :, :, None]
    # x code: row m·stride + chunk·DK + c·DK/4 + j (rows past M read row M - 1: never stored)
    m3 = _arange3(BM, 1, XL)  # mma column j: chunk j % DG of x row j // DG
    wk_x = _arange3(B, 0, XL) * DG + m3 % DG
    xm = gl.minimum(pid_m * XR + m3 // DG, M - 1)
    jx = gl.arange(0, DK // 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, X_LAYOUT))))
    x_ptrs = (xq_ptr + (xm.to(gl.int64) * stride_xq + wk_x * DK + _arange3(4, 2, XL) * (DK // 4))[:, :, :, None]
              + jx[None, None, None, :])
    wk_x = wk_x[:, :, :, None]
    # fp8 scales per chunk (b) and x row: x_scale[m, g], w_scale[row block, g]
    j_s = gl.arange(0, BM, layout=gl.SliceLayout(0, SL))
    wk_s = gl.arange(0, B, layout=gl.SliceLayout(1, SL))[:, None]  # [B, 1]: the chunk
    if DG > 1:  # [B, BM]: column j's chunk (each column's scale product is its own chunk's)
        wk_s = wk_s * DG + (j_s % DG)[None, :]
    sm = gl.minimum(pid_m * XR + j_s // DG, M - 1)[None, :]  # [1, BM]
    xs_ptrs = xs_ptr + sm * stride_xsm + wk_s * 0
    ws_ptrs = ws_ptr + ((pid_n * RP) // GROUP) * stride_wsn + wk_s * 0

    if FP8:
        acc = gl.zeros([B, BN, BM], gl.float32, MMA)
    else:
        acc = gl.zeros([B, BN, BM], gl.int32, MMA)
    # The first trip's weights need nothing from the quantization grid: issue them before waiting.
    # (Issuing the second trip's too made both buffers loop-carried: ptxas then spilled at DK = 128.)
    w0 = _load_w(0, w_ptrs, wk_w, NUM_CHUNKS, TRIPS, CPT, CW, EVEN)
    if WAIT_PRIOR:
        _grid_wait()
    if XPF:
        x0, s0 = _load_x(0, x_ptrs, wk_x, xs_ptrs, ws_ptrs, wk_s, NUM_CHUNKS, TRIPS, CPT, DK, GROUP, stride_xsg,
                         stride_wsg, FP8, EVEN)
    else:
        x0 = 0
        s0 = 0
    # Two buffers, the loop unrolled by two: trip t + 1 is loaded before trip t is multiplied (an odd
    # trip count runs one masked trip: zeros in, nothing added).
    for t in range(0, TRIPS, 2):
        w1 = _load_w(t + 1, w_ptrs, wk_w, NUM_CHUNKS, TRIPS, CPT, CW, EVEN)
        if XPF:
            x1, s1 = _load_x(t + 1, x_ptrs, wk_x, xs_ptrs, ws_ptrs, wk_s, NUM_CHUNKS, TRIPS, CPT, DK, GROUP,
                             stride_xsg, stride_wsg, FP8, EVEN)
            xa = x0
            sa = s0
        else:
            xa, sa = _load_x(t, x_ptrs, wk_x, xs_ptrs, ws_ptrs, wk_s, NUM_CHUNKS, TRIPS, CPT, DK, GROUP, stride_xsg,
                             stride_wsg, FP8, EVEN)
        acc = _chunk_product(acc, w0, xa, sa, MMA, FP8)
        w0 = _load_w(t + 2, w_ptrs, wk_w, NUM_CHUNKS, TRIPS, CPT, CW, EVEN)
        if XPF:
            x0, s0 = _load_x(t + 2, x_ptrs, wk_x, xs_ptrs, ws_ptrs, wk_s, NUM_CHUNKS, TRIPS, CPT, DK, GROUP,
                             stride_xsg, stride_wsg, FP8, EVEN)
            xb = x1
            sb = s1
        else:
            xb, sb = _load_x(t + 1, x_ptrs, wk_x, xs_ptrs, ws_ptrs, wk_s, NUM_CHUNKS, TRIPS, CPT, DK, GROUP,
                             stride_xsg, stride_wsg, FP8, EVEN)
        acc = _chunk_product(acc, w1, xb, sb, MMA, FP8)

    y = _diag_sum(acc, DG)  # [RP, XR]
    OL: gl.constexpr = y.type.layout
    offs_n = pid_n * RP + gl.arange(0, RP, layout=gl.SliceLayout(1, OL))
    offs_m = pid_m * XR + gl.arange(0, XR, layout=gl.SliceLayout(0, OL))
    n_mask = offs_n < N
    m_mask = offs_m < M
    if not FP8:  # (f32(Σ) · x_scale) · w_scale, as the family's other kernels round it
        y = (y.to(gl.float32) * gl.load(xs_ptr + offs_m * stride_xsm, mask=m_mask, other=0.0)[None, :]
             * gl.load(ws_ptr + offs_n, mask=n_mask, other=0.0)[:, None])
    if HAS_BIAS:
        y = y + gl.load(b_ptr + offs_n, mask=n_mask, other=0.0).to(gl.float32)[:, None]
    ptrs = y_ptr + offs_m.to(gl.int64)[None, :] * stride_ym + offs_n[:, None]
    gl.store(ptrs, y.to(y_ptr.dtype.element_ty), mask=n_mask[:, None] & m_mask[None, :])


_decode8_fast = cached(_decode8_kernel)


def config(mt: int, wk: int, wm: int = 1, dk: int = 64, sub: int = 1, bm: int = 16) -> dict:
    """The kernel's tiling: 16·MT·WM weight rows per program, WK·WM warps, DK-deep chunks (SUB per warp
    and trip), at most BM (8 or 16) x rows per program (M = 16 with BM = 8: two programs per weight
    tile, the second reading it from L2)."""
    return {"kernel": "decode", "MT": mt, "WK": wk, "WM": wm, "DK": dk, "SUB": sub, "BM": bm}


def check_config(cfg: dict) -> None:
    """Raise ValueError unless ``cfg`` is a well-formed decode config."""
    keys = ("MT", "WK", "WM", "DK", "SUB", "BM")
    if any(k not in cfg for k in keys) or not all(is_pow2(cfg[k]) for k in keys) or cfg["DK"] not in (64, 128) \
            or cfg["WK"] * cfg["WM"] > 16 or cfg["BM"] not in (8, 16) or cfg["MT"] > 4 or cfg["SUB"] > 4:
        # DK >= 64: each thread's slice of a chunk row is one or two 16-byte loads; BM: one or two n8 tiles
        raise ValueError(f"decode config needs MT, WK, WM, SUB powers of two (MT, SUB <= 4; WK·WM <= 16 warps), "
                         f"DK 64 or 128 and BM 8 or 16: {cfg!r}")
    for key in ("PDL", "TILED", "DIAG", "XPF"):  # PDL: the families' launch flag (programmatic dependent launch)
        if not isinstance(cfg.get(key, False), bool):
            raise ValueError(f"decode config {key} must be a bool: {cfg!r}")
    if "DG" in cfg:
        diag_chunks(cfg, 1)  # 2, 4 or 8, with DIAG (it raises)


def rows_per_program(cfg: dict) -> int:
    return 16 * int(cfg["MT"]) * int(cfg["WM"])


# The most x rows the families run this kernel for: ceil(M / BM) programs share each weight tile (launched side
# by side, so the weight comes from HBM once and from L2 for the others). Batched decoding at 17-64 tokens then
# streams the weight as M = 16 does, where the GEMMs' 64-128-row tiles are mostly padding.
MAX_M = 64


def usable(x: torch.Tensor, weight_q: torch.Tensor, cfg: dict, group: int | None = None) -> bool:
    """Whether the kernel takes an [M <= MAX_M, K] problem on x's device with ``cfg`` (``group``: fp8's
    scale block G, None for int8)."""
    K = x.shape[1]
    dk = int(cfg["DK"])
    if group is not None and (group % dk or rows_per_program(cfg) > group):
        return False
    return (x.is_cuda and _is_sm90(x.device.index or 0) and x.shape[0] <= MAX_M and K >= dk and K % dk == 0
            and weight_q.is_contiguous() and weight_q.data_ptr() % 16 == 0)


def launch(x_q, x_scale, stride_xsm, stride_xsg, weight_q, weight_scale, bias, out, cfg: dict, *,
           fp8: bool, group: int = 1, pdl: bool = False) -> None:
    """``out = x_q · weight_q^T`` scaled (module docstring) for M <= MAX_M. ``x_q`` [M, K] codes with a row
    stride that is a multiple of 16; fp8: ``weight_scale`` [ceil(N / G), K / G] and x scales at
    ``x_scale[m·stride_xsm + g·stride_xsg]``; int8: ``weight_scale`` [N], x scales at
    ``x_scale[m·stride_xsm]``. ``pdl``: launched as a programmatic dependent of the previous grid on
    the stream (which must call ``griddepcontrol.launch_dependents`` or simply finish)."""
    M, K = x_q.shape
    N = weight_q.shape[0]
    if cfg.get("TILED") and N % 16:
        raise ValueError(f"a TILED decode config reads 16-row tiles: N = {N} is not a multiple of 16")
    mt, wk, wm, dk, sub = (int(cfg[k]) for k in ("MT", "WK", "WM", "DK", "SUB"))
    bm = 8 if M <= 8 else int(cfg["BM"])
    dg = diag_chunks(cfg, M)
    chunks = K // dk
    per_trip = wk * sub * dg
    bn = 16 * mt * wm
    opts = dict(num_warps=wk * wm)
    if not fp8:
        opts["enable_fp_fusion"] = False  # the epilogue's roundings as the family's Triton kernels do
    if pdl:
        opts["launch_pdl"] = True
    _decode8_fast[(ceil_div(N, bn // dg) * ceil_div(M, bm // dg),)](
        x_q, x_scale, weight_q, weight_scale, bias if bias is not None else out, out, M, N, K, x_q.stride(0),
        stride_xsm, stride_xsg, weight_scale.stride(0), weight_scale.stride(1) if fp8 else 0, out.stride(0),
        chunks, ceil_div(chunks, per_trip),
        FP8=fp8, GROUP=group, DK=dk, BM=bm, MT=mt, WK=wk, WM=wm, SUB=sub, HAS_BIAS=bias is not None,
        EVEN=chunks % (2 * per_trip) == 0, WAIT_PRIOR=pdl, W_LAYOUT=operand_layout(wk, wm, bn, dk, sub, True),
        X_LAYOUT=operand_layout(wk, wm, bm, dk, sub, False), TILED=bool(cfg.get("TILED", False)), DG=dg,
        XPF=bool(cfg.get("XPF", True)), **opts)
