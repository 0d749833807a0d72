"""A mixture-of-experts block's experts in two grouped launches over the quantized layers' stacked buffers.

What :class:`quantkit.layers.experts.Experts` computes with one quantized linear call per expert projection (the
reference loop), here without a loop over the experts and without a host synchronization (so a decode step's experts
can be captured in a CUDA graph)::

    h[s]   = silu(x[t(s)] @ gate[e(s)]^T) * (x[t(s)] @ up[e(s)]^T)       s = a (token, slot) pair, e(s) its expert
    y[t]   = sum over the token's k slots of  w(s) * (h[s] @ down[e(s)]^T)

1. :func:`align` (one to three small launches) sorts the T·k slots by expert and pads each expert's run to a multiple of
   BLOCK_M rows: ``sorted_slots`` (-1 in the padding), the expert of each BLOCK_M block, and the number of blocks
   (a device scalar: the grid is an upper bound, the programs past the real blocks return at once).
2. ``_gate_up_kernel``: a program takes one block of one expert's rows and BLOCK_N columns of the intermediate
   dimension, streams that expert's gate and up codes over K and runs two ``tl.dot``; the epilogue applies the
   remaining scales and ``silu(gate) * up`` and writes h [T·k, I] in x's dtype.
3. ``_down_kernel``: the same over h's rows and the down codes; the epilogue multiplies by the slot's routing
   weight and writes float32 [T·k, H].
4. ``_combine_kernel`` sums the k slots of each token in slot order (deterministic, unlike atomics) and rounds the sum
   to x's dtype.

Every step is an allocation, a view or a launch through :mod:`quantkit.kernels.launch`, so eager calls can replay
their launches (:func:`experts_forward_flat` under :func:`quantkit.kernels.plan.planned`, as the linear layers do).

``SWAP`` (a launch option of the weight-only formats, used in 128-row blocks): each dot computes the tile transposed,
``acc^T [BLOCK_N, BLOCK_M] += W x^T``, so the weight converted in registers is the dot's A operand, which Hopper's
wgmma reads from registers, where as the B operand it is staged through shared memory; the same products and sums.

Rounding follows the layers: each projection's output is rounded to x's dtype, then the activation, the product
and the routing weight are each rounded to it, as the loop's tensor operations round them.

Formats (the layers' buffers, stacked over the experts: ``[E, ...]``):
    int8 weight-only   codes int8 [E, N, K], scale float32 [E, N]: ``acc = x @ codes^T`` (integers are exact in
                       bf16 / fp16), times the scale after the K loop.
    int4 weight-only   packed uint8 [E, N, K/2] (low nibble first), scale [E, N, K/g], zero-point uint8 [E, N, K/g]:
                       BLOCK_K divides the group size; each step's words become the weight ``(q - z) * s`` in
                       registers (the int4 layers' PTX conversion), rounded once to x's dtype as the int4 layers'
                       tile kernels round it from 17 rows on (float32 for float32 x), and one dot accumulates.
    int8-dynamic       codes int8 [E, N, K], scale [E, N]; x (per token) and h (per slot) quantized by the family's
                       ``quantize_act``, as the layer quantizes its input: int8 dots into an int32 accumulator, then
                       ``(acc * x_scale) * w_scale``, the reference's order.
    fp8-block          e4m3 codes [E, N, K] (passed as bytes), scales float32 [E, ceil(N/128), ceil(K/128)]; x and h
                       quantized per 1 x 128 group by the family's ``quantize_act``: BLOCK_K = 128, each step's e4m3
                       dot times the row's and the block's scales (sm_89 and newer).
float32 x runs its dots in IEEE float32 (no TF32), as the reference. Under the interpreter every dot runs on float32
copies of its operands (numpy has neither bfloat16 nor float8 arithmetic; the values are exact in float32).
"""
from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from quantkit.kernels.int4_weight_only import _MODE_BF16, _MODE_F16, _MODE_F32, _dequant_pairs, _words_to_tile
from quantkit.kernels.launch import cached

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

INT8, INT4, INT8_DYNAMIC, FP8_BLOCK = 0, 1, 2, 3
FORMATS = {"int8-weight-only": INT8, "int4-weight-only": INT4, "int8-dynamic": INT8_DYNAMIC, "fp8-block": FP8_BLOCK}
#: the activation-quantizing formats: their kernels read x (and h) quantized by the family's own quantize_act
_ACT_FAMILY = {INT8_DYNAMIC: "int8_dynamic", FP8_BLOCK: "fp8_block"}


def _bound(value: int):
    """A loop bound: under the interpreter a runtime integer is an array that ``range()`` rejects."""
    return tl.constexpr(value) if _INTERPRET else value


@triton.jit
def _weight_step(w_ptr, s_ptr, z_ptr, e, offs_n, mask_n, k0, offs_k, K, N, GROUPS,
                 FORMAT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DTYPE: tl.constexpr,
                 I4MODE: tl.constexpr, SWAP: tl.constexpr):
    """One K step of one expert's codes as the dot's B operand [BLOCK_K, BLOCK_N] (with SWAP, the weight-only
    formats', its A operand [BLOCK_N, BLOCK_K]) and a per-column scale [BLOCK_N] for the step's partial sum: int8 weight-only the codes in DTYPE (scale 1; the channel scale comes after
    the loop); int4 the weight ``(q - z) * s`` itself (scale 1), converted from the packed words in registers as
    the int4 layers' tile kernels do (``I4MODE``: float32, or bf16 / fp16 rounded once); int8-dynamic the int8
    codes; fp8-block the e4m3 codes and the 128 x 128 block's scale."""
    k = k0 + offs_k
    if FORMAT == 1:
        # [BLOCK_N, BLOCK_K / 8] little-endian int32 words, 8 codes each (the layers' packed bytes, K / 2 a row)
        words_per_row = K // 8
        words_ptr = w_ptr.to(tl.pointer_type(tl.int32))
        ptrs = words_ptr + (e * N + offs_n[:, None]).to(tl.int64) * words_per_row + \
            (k0 // 8 + tl.arange(0, BLOCK_K // 8))[None, :]
        words = tl.load(ptrs, mask=mask_n[:, None], other=0)
        g = k0 // (K // GROUPS)  # BLOCK_K divides the group size: a group may span several steps
        qp = (e * N + offs_n).to(tl.int64) * GROUPS + g
        zero = tl.load(z_ptr + qp, mask=mask_n, other=0)
        scale = tl.load(s_ptr + qp, mask=mask_n, other=0.0)
        o0, o1, o2, o3 = _dequant_pairs(words, zero, scale, I4MODE, True)
        w = _words_to_tile(o0, o1, o2, o3, BLOCK_N, BLOCK_K)
        if not SWAP:
            w = tl.trans(w)
        return w, tl.full((BLOCK_N,), 1.0, tl.float32)
    elif SWAP:  # (weight-only int8) the codes as the dot's A operand [BLOCK_N, BLOCK_K], converted in registers
        ptrs = w_ptr + (e * N + offs_n[:, None]).to(tl.int64) * K + k[None, :]
        codes = tl.load(ptrs, mask=mask_n[:, None] & (k[None, :] < K), other=0)
        return codes.to(tl.float32).to(DTYPE), tl.full((BLOCK_N,), 1.0, tl.float32)
    else:
        ptrs = w_ptr + (e * N + offs_n[None, :]).to(tl.int64) * K + k[:, None]
        codes = tl.load(ptrs, mask=mask_n[None, :] & (k[:, None] < K), other=0)
        if FORMAT == 0:
            w = codes.to(tl.float32).to(DTYPE)
            return w, tl.full((BLOCK_N,), 1.0, tl.float32)
        elif FORMAT == 2:
            return codes, tl.full((BLOCK_N,), 1.0, tl.float32)
        else:
            # the e4m3 codes arrive as their bytes (uint8): masked loads of float8 need no fill value then
            w = codes.to(tl.float8e4nv, bitcast=True)
            blocks_k = GROUPS  # ceil(K / 128): the weight scale is [E, ceil(N / 128), ceil(K / 128)]
            sp = (e * tl.cdiv(N, 128) + offs_n // 128).to(tl.int64) * blocks_k + k0 // 128
            scale = tl.load(s_ptr + sp, mask=mask_n, other=0.0)
            return w, scale


@triton.jit
def _dot(a, b, F32: tl.constexpr):
    """F32: float32 operands in IEEE float32 (float32 x; and under the interpreter, whose numpy has no bfloat16 or
    float8 dot, the operands widened exactly)."""
    if F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def _dot_i8(a, b, F32: tl.constexpr):
    """int8 x int8 -> int32, exact (the interpreter's float32 dot is exact for its small test shapes)."""
    if F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee").to(tl.int32)
    else:
        return tl.dot(a, b, out_dtype=tl.int32)


@triton.jit
def _accumulate(acc, x_ptr, xs_ptr, rows, mask_m, w_ptr, s_ptr, z_ptr, e, offs_n, mask_n, K, N, GROUPS, stride_x,
                FORMAT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DTYPE: tl.constexpr,
                F32: tl.constexpr, I4MODE: tl.constexpr, SWAP: tl.constexpr):
    """acc [BLOCK_M, BLOCK_N] += x[rows] @ W[e][offs_n]^T over all of K: float32 (int8 weight-only before its
    channel scale; fp8-block with both block scales applied per step), int32 for int8-dynamic."""
    offs_k = tl.arange(0, BLOCK_K)
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
    # SWAP (weight-only): acc^T [BLOCK_N, BLOCK_M] = W x^T, the converted weight the dot's A operand
    acc_t = tl.zeros((acc.shape[1], acc.shape[0]), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        w, scale = _weight_step(w_ptr, s_ptr, z_ptr, e, offs_n, mask_n, k0, offs_k, K, N, GROUPS, FORMAT, BLOCK_N,
                                BLOCK_K, DTYPE, I4MODE, SWAP)
        k = k0 + offs_k
        if FORMAT == 1 or FORMAT == 0:
            if FORMAT == 1:  # K is a multiple of the group, and so of BLOCK_K
                x = tl.load(x_rows + k[None, :], mask=mask_m[:, None], other=0.0)
            else:
                x = tl.load(x_rows + k[None, :], mask=mask_m[:, None] & (k[None, :] < K), other=0.0)
            if SWAP:
                acc_t += _dot(w, tl.trans(x), F32)
            else:
                acc += _dot(x, w, F32)
        elif FORMAT == 2:
            x = tl.load(x_rows + k[None, :], mask=mask_m[:, None] & (k[None, :] < K), other=0)
            acc += _dot_i8(x, w, F32)
        else:
            x = tl.load(x_rows + k[None, :], mask=mask_m[:, None] & (k[None, :] < K), other=0)
            x = x.to(tl.float8e4nv, bitcast=True)
            # x's scales [rows, ceil(K / 128)] (GROUPS), as the weight's K blocks
            x_scale = tl.load(xs_ptr + rows.to(tl.int64) * GROUPS + k0 // 128, mask=mask_m, other=0.0)
            acc += _dot(x, w, F32) * x_scale[:, None] * scale[None, :]
    if SWAP:
        acc += tl.trans(acc_t)
    return acc


@triton.jit
def _finish(acc, xs_ptr, rows, mask_m, s_ptr, e, offs_n, mask_n, N, FORMAT: tl.constexpr):
    """The accumulator as float32 with its remaining scales: int8 weight-only's channel scale, int8-dynamic's
    ``(acc * x_scale[row]) * w_scale[n]`` (the reference's order)."""
    if FORMAT == 0:
        return acc * tl.load(s_ptr + e * N + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    elif FORMAT == 2:
        x_scale = tl.load(xs_ptr + rows, mask=mask_m, other=0.0)
        w_scale = tl.load(s_ptr + e * N + offs_n, mask=mask_n, other=0.0)
        return acc.to(tl.float32) * x_scale[:, None] * w_scale[None, :]
    else:
        return acc


@triton.jit
def _block_rows(sorted_slots_ptr, block_expert_ptr, num_blocks_ptr, DIV: tl.constexpr, BLOCK_M: tl.constexpr,
                NUM_N: tl.constexpr):
    pid = tl.program_id(0)
    block = pid // NUM_N
    tile_n = pid % NUM_N
    num_blocks = tl.load(num_blocks_ptr)
    offs_m = block * BLOCK_M + tl.arange(0, BLOCK_M)
    slots = tl.load(sorted_slots_ptr + offs_m)
    e = tl.load(block_expert_ptr + block)
    valid = (block < num_blocks) & (slots >= 0)
    rows = tl.where(valid, slots // DIV, 0)
    return block < num_blocks, tile_n, e, slots, rows, valid


@triton.jit
def _gate_up_kernel(x_ptr, xs_ptr, stride_x, sorted_slots_ptr, block_expert_ptr, num_blocks_ptr,
                    gw_ptr, gs_ptr, gz_ptr, uw_ptr, us_ptr, uz_ptr, h_ptr, N, K, GROUPS,
                    TOP_K: tl.constexpr, FORMAT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, NUM_N: tl.constexpr, F32: tl.constexpr, I4MODE: tl.constexpr,
                    SWAP: tl.constexpr):
    live, tile_n, e, slots, rows, valid = _block_rows(sorted_slots_ptr, block_expert_ptr, num_blocks_ptr, TOP_K,
                                                       BLOCK_M, NUM_N)
    if live:
        DTYPE = h_ptr.dtype.element_ty
        offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = offs_n < N
        acc_type = tl.int32 if FORMAT == 2 else tl.float32
        gate = tl.zeros((BLOCK_M, BLOCK_N), acc_type)
        up = tl.zeros((BLOCK_M, BLOCK_N), acc_type)
        gate = _accumulate(gate, x_ptr, xs_ptr, rows, valid, gw_ptr, gs_ptr, gz_ptr, e, offs_n, mask_n, K, N, GROUPS,
                           stride_x, FORMAT, BLOCK_N, BLOCK_K, DTYPE, F32, I4MODE, SWAP)
        up = _accumulate(up, x_ptr, xs_ptr, rows, valid, uw_ptr, us_ptr, uz_ptr, e, offs_n, mask_n, K, N, GROUPS,
                         stride_x, FORMAT, BLOCK_N, BLOCK_K, DTYPE, F32, I4MODE, SWAP)
        # each projection's output rounded to x's dtype before the activation, as the layers' outputs are
        gate = _finish(gate, xs_ptr, rows, valid, gs_ptr, e, offs_n, mask_n, N, FORMAT).to(DTYPE).to(tl.float32)
        up = _finish(up, xs_ptr, rows, valid, us_ptr, e, offs_n, mask_n, N, FORMAT).to(DTYPE).to(tl.float32)
        act = (gate / (1.0 + tl.exp(-gate))).to(DTYPE).to(tl.float32)
        h = (act * up).to(DTYPE)
        ptrs = h_ptr + tl.where(valid, slots, 0).to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.store(ptrs, h, mask=valid[:, None] & mask_n[None, :])


@triton.jit
def _down_kernel(h_ptr, hs_ptr, sorted_slots_ptr, block_expert_ptr, num_blocks_ptr, dw_ptr, ds_ptr, dz_ptr,
                 route_ptr, y_ptr, N, K, GROUPS, FORMAT: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_N: tl.constexpr, F32: tl.constexpr,
                 DTYPE: tl.constexpr, I4MODE: tl.constexpr, SWAP: tl.constexpr):
    live, tile_n, e, slots, rows, valid = _block_rows(sorted_slots_ptr, block_expert_ptr, num_blocks_ptr, 1,
                                                       BLOCK_M, NUM_N)
    if live:
        offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = offs_n < N
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.int32 if FORMAT == 2 else tl.float32)
        acc = _accumulate(acc, h_ptr, hs_ptr, rows, valid, dw_ptr, ds_ptr, dz_ptr, e, offs_n, mask_n, K, N, GROUPS,
                          K, FORMAT, BLOCK_N, BLOCK_K, DTYPE, F32, I4MODE, SWAP)
        out = _finish(acc, hs_ptr, rows, valid, ds_ptr, e, offs_n, mask_n, N, FORMAT)
        # the reference rounds the down projection's output to x's dtype, then weights it in that dtype
        # (in float32, rounded once: the interpreter has no bfloat16 arithmetic); the routing weight is read in
        # the router's dtype and rounded to x's here
        route = tl.load(route_ptr + rows, mask=valid, other=0.0).to(DTYPE).to(tl.float32)
        out = (out.to(DTYPE).to(tl.float32) * route[:, None]).to(DTYPE).to(tl.float32)
        ptrs = y_ptr + rows.to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.store(ptrs, out, mask=valid[:, None] & mask_n[None, :])


@triton.jit
def _combine_kernel(y_ptr, out_ptr, H, TOP_K: tl.constexpr, BLOCK: tl.constexpr):
    """out[t] = the sum of y's k rows of token t (float32, in slot order), rounded once to out's dtype: a program a
    token and BLOCK columns."""
    t = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < H
    rows = y_ptr + t * TOP_K * H
    acc = tl.load(rows + offs, mask=mask, other=0.0)
    for j in tl.static_range(1, TOP_K):
        acc += tl.load(rows + j * H + offs, mask=mask, other=0.0)
    tl.store(out_ptr + t * H + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _onehot(ids_ptr, offs, S, experts):
    """[len(offs), E_PAD] int32: each slot's expert as a one-hot row (no expert past S)."""
    ids = tl.load(ids_ptr + offs, mask=offs < S, other=-1).to(tl.int32)
    return (ids[:, None] == experts[None, :]).to(tl.int32)


@triton.jit
def _runs(counts, experts, block_expert_ptr, num_blocks_ptr, CAPACITY, E: tl.constexpr, BLOCK_M: tl.constexpr,
          CHUNK: tl.constexpr):
    """From the experts' slot counts [E_PAD]: each block's expert (the number of runs, each padded to a multiple of
    BLOCK_M, that end at or before the block's start) and the number of blocks; returns the runs' starts."""
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, axis=0)
    for b0 in range(0, CAPACITY // BLOCK_M, CHUNK):
        blocks = b0 + tl.arange(0, CHUNK)
        done = (ends[None, :] <= (blocks * BLOCK_M)[:, None]) & (experts[None, :] < E)
        expert = tl.minimum(tl.sum(done.to(tl.int32), axis=1), E - 1)
        tl.store(block_expert_ptr + blocks, expert, mask=blocks < CAPACITY // BLOCK_M)
    tl.store(num_blocks_ptr, tl.sum(padded, axis=0) // BLOCK_M)
    return ends - padded


@triton.jit
def _align_kernel(ids_ptr, S, rank_ptr, sorted_ptr, block_expert_ptr, num_blocks_ptr, CAPACITY, E: tl.constexpr,
                  E_PAD: tl.constexpr, BLOCK_M: tl.constexpr, CHUNK: tl.constexpr):
    """:func:`align` in one program (one launch instead of some 25 torch operations: decode sizes, where the host's
    time is the cost). Pass 1: each slot's rank among the earlier slots of its expert, and the experts' counts,
    which give the runs and the blocks' experts. Pass 2: every slot stored at its expert's start plus its rank (the
    buffer filled with -1 first)."""
    experts = tl.arange(0, E_PAD)
    running = tl.zeros((E_PAD,), tl.int32)
    for c0 in range(0, S, CHUNK):
        offs = c0 + tl.arange(0, CHUNK)
        onehot = _onehot(ids_ptr, offs, S, experts)
        before = tl.cumsum(onehot, axis=0) - onehot + running[None, :]
        tl.store(rank_ptr + offs, tl.sum(before * onehot, axis=1), mask=offs < S)
        running += tl.sum(onehot, axis=0)
    starts = _runs(running, experts, block_expert_ptr, num_blocks_ptr, CAPACITY, E, BLOCK_M, CHUNK)
    for p0 in range(0, CAPACITY, CHUNK * 4):
        offs = p0 + tl.arange(0, CHUNK * 4)
        tl.store(sorted_ptr + offs, tl.full((CHUNK * 4,), -1, tl.int32), mask=offs < CAPACITY)
    tl.debug_barrier()
    for c0 in range(0, S, CHUNK):
        offs = c0 + tl.arange(0, CHUNK)
        onehot = _onehot(ids_ptr, offs, S, experts)
        pos = tl.sum(onehot * starts[None, :], axis=1) + tl.load(rank_ptr + offs, mask=offs < S, other=0)
        tl.store(sorted_ptr + pos, offs, mask=offs < S)


@triton.jit
def _align_count_kernel(ids_ptr, S, counts_ptr, sorted_ptr, CAPACITY, FILL_PER_PROGRAM, E_PAD: tl.constexpr,
                        CHUNK: tl.constexpr):
    """:func:`align` over many slots, pass 1 of 3 (a program a chunk of CHUNK slots): the chunk's count of each
    expert, and the program's share of the sorted buffer filled with -1."""
    c = tl.program_id(0)
    experts = tl.arange(0, E_PAD)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    tl.store(counts_ptr + c * E_PAD + experts, tl.sum(_onehot(ids_ptr, offs, S, experts), axis=0))
    first = c * FILL_PER_PROGRAM
    for f0 in range(0, FILL_PER_PROGRAM, CHUNK * 4):
        fill = first + f0 + tl.arange(0, CHUNK * 4)
        tl.store(sorted_ptr + fill, tl.full((CHUNK * 4,), -1, tl.int32),
                 mask=(fill < CAPACITY) & (fill < first + FILL_PER_PROGRAM))


@triton.jit
def _align_offsets_kernel(counts_ptr, CHUNKS, offsets_ptr, starts_ptr, block_expert_ptr, num_blocks_ptr, CAPACITY,
                          E: tl.constexpr, E_PAD: tl.constexpr, BLOCK_M: tl.constexpr, CHUNK: tl.constexpr):
    """Pass 2 (one program): each chunk's offset in each expert's run (the counts of the chunks before it), the
    padded runs' starts, each block's expert and the number of blocks. The offsets go to their own buffer, not over
    the counts: with fewer experts than threads each count is held by several threads, and one warp's store could
    land before another warp's load of the same count (GPU run, round 38 call 3)."""
    experts = tl.arange(0, E_PAD)
    running = tl.zeros((E_PAD,), tl.int32)
    for c in range(0, CHUNKS):
        tl.store(offsets_ptr + c * E_PAD + experts, running)
        running += tl.load(counts_ptr + c * E_PAD + experts)
    tl.store(starts_ptr + experts, _runs(running, experts, block_expert_ptr, num_blocks_ptr, CAPACITY, E, BLOCK_M,
                                         CHUNK))


@triton.jit
def _align_place_kernel(ids_ptr, S, offsets_ptr, starts_ptr, sorted_ptr, E_PAD: tl.constexpr, CHUNK: tl.constexpr):
    """Pass 3 (a program a chunk): each slot stored at its expert's start, plus its chunk's offset in the expert's
    run, plus its rank among the chunk's earlier slots of that expert."""
    c = tl.program_id(0)
    experts = tl.arange(0, E_PAD)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    onehot = _onehot(ids_ptr, offs, S, experts)
    base = tl.load(starts_ptr + experts) + tl.load(offsets_ptr + c * E_PAD + experts)
    before = tl.cumsum(onehot, axis=0) - onehot + base[None, :]
    tl.store(sorted_ptr + tl.sum(before * onehot, axis=1), offs, mask=offs < S)


_align_fast = cached(_align_kernel)
_gate_up_fast = cached(_gate_up_kernel)
_down_fast = cached(_down_kernel)
_combine_fast = cached(_combine_kernel)
_align_count_fast = cached(_align_count_kernel)
_align_offsets_fast = cached(_align_offsets_kernel)
_align_place_fast = cached(_align_place_kernel)

#: at most this many slots, :func:`align` runs as one program (``_align_kernel``); above, in three launches
ALIGN_KERNEL_SLOTS = 1024


def align(top_k_index: torch.Tensor, num_experts: int, block_m: int):
    """(sorted_slots int32 [P], block_expert int32 [P / block_m], num_blocks int32 [1]): the T·k slots sorted by
    expert (each expert's slots in their order), each expert's run padded with -1 to a multiple of ``block_m``; P
    bounds the padded length from the host (no synchronization). Up to ``ALIGN_KERNEL_SLOTS`` slots one program
    (``_align_kernel``), above three launches over chunks of slots (``_align_count_kernel`` ...), where some 30
    torch operations cost ~500 µs of host time a call at Qwen3-30B-A3B's 256 tokens (round 38, call 2)."""
    # int64 or int32 (routers may give either): the kernels read both, with unit stride (a slice of a wider index,
    # e.g. top-1 from [T, 2], reshapes to a strided view)
    flat = top_k_index.reshape(-1).contiguous()
    slots = flat.numel()
    device = flat.device
    capacity = slots + min(num_experts, slots) * (block_m - 1)
    capacity = (capacity + block_m - 1) // block_m * block_m
    blocks = capacity // block_m
    e_pad = triton.next_power_of_2(num_experts)
    if slots <= ALIGN_KERNEL_SLOTS:
        # one int32 allocation for the four outputs (decode sizes: the host's time is the cost)
        buffer = torch.empty(capacity + blocks + 1 + slots, dtype=torch.int32, device=device)
        sorted_slots, block_expert, num_blocks, rank = buffer.split([capacity, blocks, 1, slots])
        _align_fast[(1,)](flat, _bound(slots), rank, sorted_slots, block_expert, num_blocks, _bound(capacity),
                          E=num_experts, E_PAD=e_pad, BLOCK_M=block_m, CHUNK=max(16, min(128, 8192 // e_pad)),
                          num_warps=8)
        return sorted_slots, block_expert, num_blocks
    chunk = max(16, min(256, 8192 // e_pad))
    chunks = triton.cdiv(slots, chunk)
    buffer = torch.empty(capacity + blocks + 1 + 2 * chunks * e_pad + e_pad, dtype=torch.int32, device=device)
    sorted_slots, block_expert, num_blocks, counts, offsets, starts = buffer.split(
        [capacity, blocks, 1, chunks * e_pad, chunks * e_pad, e_pad])
    fill = triton.cdiv(capacity, chunks)
    _align_count_fast[(chunks,)](flat, slots, counts, sorted_slots, capacity, _bound(fill), E_PAD=e_pad, CHUNK=chunk,
                                 num_warps=8)
    _align_offsets_fast[(1,)](counts, _bound(chunks), offsets, starts, block_expert, num_blocks, _bound(capacity),
                              E=num_experts, E_PAD=e_pad, BLOCK_M=block_m, CHUNK=max(16, min(128, 8192 // e_pad)),
                              num_warps=4)
    _align_place_fast[(chunks,)](flat, slots, offsets, starts, sorted_slots, E_PAD=e_pad, CHUNK=chunk, num_warps=8)
    return sorted_slots, block_expert, num_blocks


def rows_per_expert(slots: int, experts: int) -> float:
    """The rows an expert gets when the slots spread evenly over the experts (what the tiles are sized by)."""
    return slots / max(1, min(experts, slots))


@functools.lru_cache(maxsize=1024)
def _config(slots: int, experts: int, fmt: int, group: int, gated: bool, x_bytes: int) -> dict:
    """Tiles by the expected rows an expert: 16-row blocks at decode sizes, up to 128 at prefill sizes; K steps of
    128 (int4: its group, up to 128; int8-dynamic: 64). The gate / up kernel's two accumulators take 128 columns up
    to 64-row blocks. From round 37's grid (call 8, notes/moe.md): int8 weight-only at Qwen3-30B-A3B's 256 tokens
    404 -> 344 µs with 128-deep steps, and 128-wide gate / up tiles for int4 then. int4 since round 38 converts its
    weight in registers for one dot a step; its grid (call 1): 64-wide tiles in blocks of up to 32 rows. In
    128-row blocks the weight-only formats run SWAP (call 7). Two pipeline stages where three x tiles would not fit
    in shared memory beside the codes (float32 x in 128-row blocks)."""
    rows = rows_per_expert(slots, experts)
    block_m = 16 if rows <= 16 else 32 if rows <= 48 else 64 if rows <= 160 else 128
    block_k = min(group, 128) if fmt == INT4 else 64 if fmt == INT8_DYNAMIC else 128
    stages = 3 if block_m * block_k * x_bytes <= 32 * 1024 else 2
    if block_m == 128 and fmt in (INT8, INT4) and x_bytes == 2:
        # acc^T = W x^T (the converted weight the dot's A operand): at Mixtral-8x7B's 2048 tokens int8 5,358 ->
        # 4,616 µs, int4 5,833 -> 5,423 (round 38, call 7); slower in every 16- and 64-row block it was timed in
        return dict(BLOCK_M=128, BLOCK_N=128 if fmt == INT8 else 64, BLOCK_K=block_k,
                    num_warps=8 if fmt == INT8 else 4, num_stages=3, SWAP=True)
    if fmt == INT4 and block_m <= 32:
        block_n = 64  # int4 at decode sizes (round 37, call 9: 128-wide tiles 47 -> 71 µs at Qwen's T = 1)
    elif gated:
        block_n = 128 if block_m <= 64 else 64
    else:
        block_n = 64 if block_m == 64 else 128
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=8 if block_m == 128 else 4,
                num_stages=stages, SWAP=False)


def experts_forward(x: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor, fmt: str,
                    gate: tuple, up: tuple, down: tuple, group_size: int = 0, scale_fmt: str | None = None,
                    configs: tuple[dict, dict] | None = None) -> torch.Tensor:
    """The experts of one block on ``x`` [T, H]: ``gate`` / ``up`` / ``down`` are the stacked buffers
    ``(codes, scale, zero_point or None)`` of the format (``group_size``: int4's group; ``scale_fmt``: fp8-block's
    activation scales); returns [T, H] in x's dtype. ``configs``: the two kernels' launch configs (same BLOCK_M;
    int4's BLOCK_K a divisor of the group, at least 32; fp8-block's 128), for probes; by default by size."""
    from quantkit.ops.dispatch import resolve

    code = FORMATS[fmt]
    tokens, hidden = x.shape
    top_k = top_k_index.shape[-1]
    experts, inter = gate[0].shape[0], gate[0].shape[1]
    slots = tokens * top_k
    if not x.is_contiguous():
        x = x.contiguous()
    dtype = x.dtype
    f32 = dtype == torch.float32 or _INTERPRET
    x_bytes = 1 if code in _ACT_FAMILY else x.element_size()
    if configs is not None:
        up_cfg, down_cfg = ({"SWAP": False, **cfg} for cfg in configs)
    else:
        up_cfg = _config(slots, experts, code, group_size, gated=True, x_bytes=x_bytes)
        down_cfg = _config(slots, experts, code, group_size, gated=False, x_bytes=x_bytes)
    sorted_slots, block_expert, num_blocks = align(top_k_index, experts, up_cfg["BLOCK_M"])
    grid_m = block_expert.numel()

    def quantized(t: torch.Tensor):
        """(the kernel's input, its scales): the activation-quantizing formats quantize as their layers do."""
        if code == INT8_DYNAMIC:
            return resolve("int8_dynamic", "quantize_act", t.device)(t)
        if code == FP8_BLOCK:
            q, scale = resolve("fp8_block", "quantize_act", t.device)(t, 128, scale_fmt)
            return q.view(torch.uint8), scale
        return t, t

    if code == FP8_BLOCK:  # e4m3 codes as bytes (see _weight_step)
        gate, up, down = ((t[0].view(torch.uint8),) + tuple(t[1:]) for t in (gate, up, down))

    def groups(k: int) -> int:
        return k // group_size if code == INT4 else -(-k // 128) if code == FP8_BLOCK else 1

    zero = [t[2] if t[2] is not None else t[1] for t in (gate, up, down)]
    i4mode = _MODE_F32 if f32 else _MODE_BF16 if dtype == torch.bfloat16 else _MODE_F16
    x_in, x_scale = quantized(x)
    h = torch.empty(slots, inter, dtype=dtype, device=x.device)
    num_n = triton.cdiv(inter, up_cfg["BLOCK_N"])
    _gate_up_fast[(grid_m * num_n,)](
        x_in, x_scale, x_in.stride(0), sorted_slots, block_expert, num_blocks, gate[0], gate[1], zero[0], up[0],
        up[1], zero[1], h, inter, _bound(hidden), groups(hidden), TOP_K=top_k, FORMAT=code, NUM_N=num_n, F32=f32,
        I4MODE=i4mode, **up_cfg)
    h_in, h_scale = quantized(h)
    y = torch.empty(slots, hidden, dtype=torch.float32, device=x.device)
    route = top_k_weights.contiguous()  # read as [T·k] (itself when contiguous: no copy, nothing for a plan to refuse)
    num_n = triton.cdiv(hidden, down_cfg["BLOCK_N"])
    _down_fast[(grid_m * num_n,)](
        h_in, h_scale, sorted_slots, block_expert, num_blocks, down[0], down[1], zero[2], route, y, hidden,
        _bound(inter), groups(inter), FORMAT=code, NUM_N=num_n, F32=f32, DTYPE=_TL_DTYPES[dtype],
        I4MODE=i4mode, **down_cfg)
    out = torch.empty(tokens, hidden, dtype=dtype, device=x.device)
    block = min(1024, triton.next_power_of_2(hidden))
    _combine_fast[(tokens, triton.cdiv(hidden, block))](y, out, hidden, TOP_K=top_k, BLOCK=block,
                                                        num_warps=4 if block >= 512 else 1)
    return out


def experts_forward_flat(x, top_k_index, top_k_weights, gate_codes, gate_scale, gate_zero_point, up_codes, up_scale,
                         up_zero_point, down_codes, down_scale, down_zero_point, fmt, group_size, scale_fmt):
    """:func:`experts_forward` with the stacks as separate arguments (``quantkit::moe_experts``'s order): the form
    launch plans wrap, keying the three leading tensors by layout and the stacks by address."""
    return experts_forward(x, top_k_index, top_k_weights, fmt, (gate_codes, gate_scale, gate_zero_point),
                           (up_codes, up_scale, up_zero_point), (down_codes, down_scale, down_zero_point), group_size,
                           scale_fmt)


_TL_DTYPES = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}
