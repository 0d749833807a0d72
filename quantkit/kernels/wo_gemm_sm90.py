"""Weight-only GEMMs for large M on sm_90, written in Gluon: y = x @ dequant(W)^T (+ bias), int8 or int4.

Why Gluon. A weight-only GEMM must turn every weight tile into a 16-bit operand for the tensor cores.
In Triton's ``tl`` the conversion, the store of the converted tile and the wgmma that reads it share
one shared-memory buffer, so Triton waits for each step's wgmma before the next conversion
(notes/int8_weight_only.md: ~0.65x bf16 at M >= 1024). Gluon exposes TMA, mbarriers, asynchronous
wgmma and register layouts directly.

The kernel (``_wo_rs_kernel``) computes Y^T tiles = W_tile · X_tile^T with the converted weight as
wgmma's A operand *in registers* and the x tile, as TMA wrote it, as the B operand in shared memory:

* x tiles [BLOCK_M, BLOCK_K] (bf16/fp16) and weight tiles [BLOCK_N, BLOCK_K] (int8; packed int4:
  BLOCK_K / 2 bytes) arrive by TMA into a ring of STAGES slots, one mbarrier each;
* each step loads the weight fragment of its warp from the slot, converts it in registers (inline
  PTX, exact) and issues an asynchronous wgmma, then waits only for the previous step's
  (``num_outstanding=1``), so the conversion of step k + 1 runs while the tensor cores work on step k;
  after a CTA barrier (both warpgroups retired step k - 1) that step's slot is refilled.

Why the register operand: no 16-bit copy of the weight is written to shared memory or read back. Per
256 x rows × 128 weight rows × 64 K the shared-memory traffic is ~112 KB (TMA writes, the fragment
loads, the wgmmas' reads of x), below the ~128 B/clk the SM delivers at the tensor cores' 1,024-clock
step; kernels that stage a bf16 operand move ~160 KB and ran at ~0.8x of cuBLAS (round 4's, removed;
notes/int8_weight_only.md). The loop is unrolled by two so that consecutive steps' A fragments are
different PTX registers: rewriting registers an in-flight wgmma reads is undefined behaviour, and with
one value per step the next step's conversion would do exactly that. ptxas keeps both sets live until
the ``wgmma.wait_group`` that retires them; the CPU test checks the SASS for any write to an in-flight
A fragment. The K steps are rounded up to an even count (one zero-filled step at most).

A program computes tiles program_id, program_id + nprog, ... (``PERSISTENT``: one program per SM);
its steps are numbered across its tiles, so the ring runs on across tile boundaries.

Stream-K (``STREAM_K``, persistent). When the tiles leave the last wave at most half full (448 tiles of 256 x
128 on 132 SMs at 14336 x 4096, M = 1024: 3 waves and 52 tiles), the whole waves run as plain tiles and each
remaining tile is cut along K into 2-4 equal pieces, one per program (:func:`stream_k_split`). With fewer
tiles than half the SMs (M = 128 at N = 4096: 32 tiles of 128 x 128) there is no whole wave, and every tile is
cut: split-K, combined in the kernel. The program whose piece arrives last combines them, counted by an atomic
counter per tile (zeroed per call by a one-program kernel that the GEMM follows as a programmatic dependent):
the other pieces go through a float32 workspace in the output's allocation, the last one straight from the
idle ring's shared memory. Pieces are summed in a fixed order, so the output does not depend on which program
combined (runs are bit-identical). Never a spin-wait: no program waits for another to be scheduled. The
returned output is a view of that larger block, so its storage holds the workspace too while it lives (13.6 MB
next to a 29.4 MB output at the shape above). Measured (notes/int8_weight_only.md, round 8).

The same kernel takes packed int4 weights (``INT4``, :func:`launch_int4`): tiles [BLOCK_N, BLOCK_K / 2]
of bytes loaded in the layout whose two nibbles are exactly the A fragment's registers
(:func:`packed_a_layout`), each byte converted with its group's zero-point and scale in one pass. A K step is
part of a group, one group, or (groups of 16-32) several: then each row loads one zero-point and scale per group
of the step, and the bytes are viewed as [rows, groups, columns] (:func:`packed_a_layout3`), the group index
being a register index of the fragment, so that each byte meets its own group's pair without moving data. Groups
of 32 used to cut the step to 32 columns: on an H100 that ran M = 128 at 0.74-0.95x of bf16 and M = 1024 at
0.59-0.67x, two groups a 64-deep step 0.96-1.23x and 0.72-0.78x (notes/int4_weight_only.md, round 34).

Numerics. int8: those of ``int8_weight_only_linear`` — float32 accumulation in the tensor cores, the
per-channel scale and the bias applied once to the float32 sum, one rounding to x.dtype. int4: the
weight (q - z)·s rounded once to x.dtype (as the reference's dequantized weight cast to it), float32
accumulation, bias, one rounding.

Requirements (the callers check, :func:`usable`, :func:`usable_int4`): sm_90, x bf16/fp16 with unit
stride along K and a 16-byte-aligned row stride, K a multiple of 16 (TMA's 16-byte rows for the int8
weight; 32 for packed int4, whose scales must also be in x's dtype), 16-byte aligned base addresses.
Edges in M, N and K are zero-filled by TMA; the output store is masked.
"""
from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from quantkit.kernels.launch import cached
from quantkit.kernels.workspace import out_with_workspace, zero_int32
from quantkit.kernels.tiling import grouped_pid
from quantkit.reference.common import ceil_div


@gluon.jit
def _store_tile_transposed(acc, scale_ptr, bias_ptr, y_ptr, M, N, stride_ym, off_m, off_n, HAS_SCALE: gl.constexpr,
                           HAS_BIAS: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                           num_warps: gl.constexpr):
    """y tile from a Y^T accumulator [BLOCK_N, BLOCK_M]: acc (· scale[n]) (+ bias[n]), one rounding to
    y's dtype, then moved (through shared memory) to a layout in which each thread holds 8 outputs
    that are consecutive in y's rows, for 16-byte stores."""
    TPW_N: gl.constexpr = min(BLOCK_N // 8, 32)
    out_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[8, 1], threads_per_warp=[TPW_N, 32 // TPW_N],
                                                warps_per_cta=[1, num_warps], order=[0, 1])
    mma_layout: gl.constexpr = acc.type.layout
    offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma_layout))
    n_ok = offs_n < N
    y = acc
    if HAS_SCALE:
        y = y * gl.load(scale_ptr + offs_n, mask=n_ok, other=0.0).to(gl.float32)[:, None]
    if HAS_BIAS:
        y = y + gl.load(bias_ptr + offs_n, mask=n_ok, other=0.0).to(gl.float32)[:, None]
    y = gl.convert_layout(y.to(y_ptr.dtype.element_ty), out_layout)
    offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, out_layout))
    offs_m = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, out_layout))
    ptrs = y_ptr + offs_m.to(gl.int64)[None, :] * stride_ym + offs_n[:, None]
    gl.store(ptrs, y, mask=(offs_n < N)[:, None] & (offs_m < M)[None, :])


# int8 pairs (one 16-bit register: the A fragment holds two consecutive k per register) to 16-bit
# float pairs, exactly, in 4 instructions (Triton's generic conversion of this layout takes ~7.5).
# The bytes b0, b1 are first spread to the low bytes of the two halves (t = 0x00b1_00b0). bf16 (7
# mantissa bits): v = 0x4300 | (b & 0x7f) is 128 + (b & 127) and c = 0x4300 | (b & 0x80) is 128 or
# 256 (bit 7 is the exponent's lowest bit), so v - c = b - 256·(b >> 7) = q. fp16 (10 mantissa bits):
# v = 0x6400 | (b ^ 0x80) is 1024 + q + 128, minus 1152 (0x6480) is q. Both subtractions are exact.
_ASM_I8X2_TO_BF16X2 = gl.constexpr("""{
    .reg .b32 t, v, c;
    cvt.u32.u16 t, $1;
    prmt.b32 t, t, 0, 0x7170;
    lop3.b32 v, t, 0x007f007f, 0x43004300, 0xea;
    lop3.b32 c, t, 0x00800080, 0x43004300, 0xea;
    sub.rn.bf16x2 $0, v, c;
}""")
_ASM_I8X2_TO_F16X2 = gl.constexpr("""{
    .reg .b32 t, v, c;
    cvt.u32.u16 t, $1;
    prmt.b32 t, t, 0, 0x7170;
    lop3.b32 v, t, 0x00800080, 0x64006400, 0xbe;
    mov.b32 c, 0x64806480;
    sub.rn.f16x2 $0, v, c;
}""")


@gluon.jit
def _int8_pairs_to_16bit(q, dtype: gl.constexpr):
    if dtype == gl.bfloat16:
        return gl.inline_asm_elementwise(_ASM_I8X2_TO_BF16X2, "=r,h", [q], dtype=gl.bfloat16, is_pure=True, pack=2)
    else:
        return gl.inline_asm_elementwise(_ASM_I8X2_TO_F16X2, "=r,h", [q], dtype=gl.float16, is_pure=True, pack=2)


# One packed int4 byte (codes q0 = k even, low nibble; q1 = k odd) with its group's zero-point and
# scale -> the 16-bit pair ((q0 - z)·s, (q1 - z)·s), each rounded once (as the reference's weight
# cast to x.dtype). t = b | b << 12 puts q0 in bits 0..3 and q1 in bits 16..19; OR-ing the magic
# (bf16 128 / fp16 1024: the codes fall in the mantissa) gives (magic + q0, magic + q1) exactly;
# minus (magic + z) gives q - z exactly; one multiply by s rounds once.
def _asm_i4x2(magic: int, ty: str) -> gl.constexpr:
    return gl.constexpr(f"""{{
    .reg .b32 t, zz, ss;
    and.b32 t, $2, 0xff;
    mul.lo.u32 t, t, 0x1001;
    lop3.b32 t, t, 0x000f000f, {magic * 0x10001:#010x}, 0xea;
    mov.b32 zz, {{$3, $3}};
    mov.b32 ss, {{$4, $4}};
    sub.rn.{ty}x2 t, t, zz;
    mul.rn.{ty}x2 t, t, ss;
    mov.b32 {{$0, $1}}, t;
}}""")


_ASM_I4X2_TO_BF16X2 = _asm_i4x2(0x4300, "bf16")
_ASM_I4X2_TO_F16X2 = _asm_i4x2(0x6400, "f16")


@gluon.jit
def _int4_bytes_to_16bit(p, zm, s, a_layout: gl.constexpr, P3_LAYOUT: gl.constexpr):
    """Packed bytes [R, C] (layout: the A fragment's registers with k halved) -> the A operand
    [R, 2C] in ``a_layout``; zm = magic + z and s per row, or with ``P3_LAYOUT`` (several groups a K step) per
    row and group [R, GPS]: the bytes are viewed as [R, GPS, C / GPS] (the group is a register index of the
    fragment, so the view and the broadcast move no data) and each takes its group's pair."""
    R: gl.constexpr = p.shape[0]
    C: gl.constexpr = p.shape[1]
    if P3_LAYOUT is not None:
        p = gl.convert_layout(p.reshape([R, zm.shape[1], C // zm.shape[1]]), P3_LAYOUT)
        zm = gl.broadcast(zm[:, :, None], p)[0]
        s = gl.broadcast(s[:, :, None], p)[0]
    else:
        zm = gl.broadcast(zm[:, None], p)[0]
        s = gl.broadcast(s[:, None], p)[0]
    if s.dtype == gl.bfloat16:
        lo, hi = gl.inline_asm_elementwise(_ASM_I4X2_TO_BF16X2, "=h,=h,r,h,h", [p, zm, s],
                                           dtype=(gl.bfloat16, gl.bfloat16), is_pure=True, pack=1)
    else:
        lo, hi = gl.inline_asm_elementwise(_ASM_I4X2_TO_F16X2, "=h,=h,r,h,h", [p, zm, s],
                                           dtype=(gl.float16, gl.float16), is_pure=True, pack=1)
    a = gl.join(lo, hi).reshape([R, 2 * C])
    return gl.convert_layout(a, a_layout)  # the same registers: no data moves


@gluon.jit
def _tile_offsets(tile, M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    pid_m, pid_n = grouped_pid(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@gluon.jit
def _rs_refill(g, kk, kb, nk, nkb, off_m, off_n, noff_m, noff_n, total, x_desc, w_desc, x_ring, w_ring, ready, pred,
               STAGES: gl.constexpr):
    """Issue the TMA loads of this program's step g (nothing past its last one), which is step kk of
    the current unit (K steps kb .. kb + nk - 1 of the tile at off_m, off_n) or, when kk >= nk, step
    kk - nk of the next unit (K steps from nkb of the tile at noff_m, noff_n; every unit is at least
    STAGES - 1 steps long, so a refill never reaches further). The weight's tile is BLOCK_K columns
    of int8 or BLOCK_K / 2 bytes of packed int4."""
    X_COLS: gl.constexpr = x_desc.block_type.shape[1]
    W_COLS: gl.constexpr = w_desc.block_type.shape[1]
    tile_bytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes
    nxt = kk >= nk
    k = gl.where(nxt, nkb + kk - nk, kb + kk)
    om = gl.where(nxt, noff_m, off_m)
    on = gl.where(nxt, noff_n, off_n)
    s = g % STAGES
    pred = pred & (g < total)
    mbarrier.expect(ready.index(s), tile_bytes, pred=pred)
    tma.async_copy_global_to_shared(x_desc, [om, k * X_COLS], ready.index(s), x_ring.index(s), pred=pred)
    tma.async_copy_global_to_shared(w_desc, [on, k * W_COLS], ready.index(s), w_ring.index(s), pred=pred)


@gluon.jit
def _rs_group(k, s_rows, z_rows, row_ok, K, dtype: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_SIZE: gl.constexpr,
              INT4: gl.constexpr, P3_LAYOUT: gl.constexpr):
    """int4: (magic + z, s) of K step k's group for this thread's weight rows (s_rows, z_rows: each
    row's first scale and zero-point; zeros past N or K); with ``P3_LAYOUT`` (groups smaller than the step) of
    each of the step's BLOCK_K / GROUP_SIZE groups, [rows, groups]. magic + z is built in the 16-bit pattern
    itself: z <= 15 falls in the mantissa of bf16 128 (0x4300) or fp16 1024 (0x6400), exactly (one
    OR, where a float conversion and add took three instructions)."""
    if INT4:
        if P3_LAYOUT is not None:
            GPS: gl.constexpr = BLOCK_K // GROUP_SIZE
            grp = (k * BLOCK_K) // GROUP_SIZE + gl.arange(0, GPS, layout=gl.SliceLayout(0, gl.SliceLayout(2, P3_LAYOUT)))
            ok = row_ok[:, None] & (grp * GROUP_SIZE < K)[None, :]
            s = gl.load(s_rows[:, None] + grp[None, :], mask=ok, other=0.0).to(dtype)
            z = gl.load(z_rows[:, None] + grp[None, :], mask=ok, other=0)
        else:
            ok = row_ok & (k * BLOCK_K < K)
            grp = (k * BLOCK_K) // GROUP_SIZE
            s = gl.load(s_rows + grp, mask=ok, other=0.0).to(dtype)
            z = gl.load(z_rows + grp, mask=ok, other=0)
        MAGIC: gl.constexpr = 0x4300 if dtype == gl.bfloat16 else 0x6400
        return (z.to(gl.int16) | MAGIC).to(dtype, bitcast=True), s
    else:
        return 0.0, 0.0


@gluon.jit
def _rs_step(g, kc, acc, zm, s, s_rows, z_rows, row_ok, K, x_ring, w_ring, ready, use_acc: gl.constexpr,
             a_layout: gl.constexpr, P_LAYOUT: gl.constexpr, STAGES: gl.constexpr, GROUP_SIZE: gl.constexpr,
             INT4: gl.constexpr, LOAD_NEXT: gl.constexpr, P3_LAYOUT: gl.constexpr):
    """Global step g (K step kc of its unit): int4 with LOAD_NEXT, load step kc + 1's zero-points and
    scales (one step ahead of their use; without it, step kc + 1 is in kc's group and they carry
    over); wait for the ring slot, convert the weight tile into A registers, issue the wgmma.
    Returns (acc, a, zm', s')."""
    dtype: gl.constexpr = x_ring.dtype
    st = g % STAGES
    mbarrier.wait(ready.index(st), (g // STAGES) & 1)
    if INT4:
        a = _int4_bytes_to_16bit(w_ring.index(st).load(P_LAYOUT), zm, s, a_layout, P3_LAYOUT)
    else:
        a = _int8_pairs_to_16bit(w_ring.index(st).load(a_layout), dtype)
    acc = warpgroup_mma(a, x_ring.index(st).permute((1, 0)), acc, use_acc=use_acc, is_async=True)
    # After the wgmma is issued, not before: the fence ahead of a wgmma (WARPGROUP.ARRIVE) waits for
    # every register write in flight, loads included, so a load issued earlier in the step would
    # hold this step's wgmma back by its whole latency; from here it has the step's retire and the
    # next step's conversion to arrive in.
    if INT4 and LOAD_NEXT:
        zm_next, s_next = _rs_group(kc + 1, s_rows, z_rows, row_ok, K, dtype, x_ring.shape[2], GROUP_SIZE, INT4,
                                    P3_LAYOUT)
    else:
        zm_next = zm
        s_next = s
    return acc, a, zm_next, s_next


@gluon.jit
def _rs_retire(g, k, kb, nk, nkb, off_m, off_n, noff_m, noff_n, total, acc, x_desc, w_desc, x_ring, w_ring, ready,
               pred, STAGES: gl.constexpr):
    """Wait until only step g's wgmma (step k of its unit) is in flight; once every warpgroup retired
    step g - 1 (the CTA barrier), its ring slot takes step g - 1 + STAGES."""
    acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
    gl.thread_barrier()
    _rs_refill(g - 1 + STAGES, k - 1 + STAGES, kb, nk, nkb, off_m, off_n, noff_m, noff_n, total, x_desc, w_desc,
               x_ring, w_ring, ready, pred, STAGES)
    return acc


@gluon.jit
def _unit(u, pid, nprog, n_dp, dp_tiles, sk_lo, sk_hi, num_k, STREAM_K: gl.constexpr):
    """This program's unit of work u: (tile, first K step kb, K steps nk, first global step g0).
    Units 0 .. n_dp - 1 are the whole tiles pid + u·nprog; with STREAM_K the next ones are the pieces,
    cut at tile boundaries, of the program's range [sk_lo, sk_hi) of the stream-K steps (tile
    dp_tiles + i's K step k is stream-K step i·num_k + k)."""
    if STREAM_K:
        st = sk_lo // num_k + (u - n_dp)
        lo = gl.maximum(sk_lo, st * num_k)
        hi = gl.minimum(sk_hi, st * num_k + num_k)
        sk = u >= n_dp
        tile = gl.where(sk, dp_tiles + st, pid + u * nprog)
        kb = gl.where(sk, lo - st * num_k, 0)
        nk = gl.where(sk, hi - lo, num_k)
        g0 = gl.where(sk, n_dp * num_k + lo - sk_lo, u * num_k)
        return tile, kb, nk, g0
    else:
        return pid + u * nprog, 0, num_k, u * num_k


@gluon.jit
def _grid_wait():
    """Programmatic dependent launch: block until the previous grid (the counters' zeroing) has
    completed and its writes are visible. A no-op when the launch was not programmatic."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


SK_MAX_PIECES = gl.constexpr(4)  # a stream-K tile is cut into at most this many pieces (stream_k_split)


@gluon.jit
def _sk_store_piece(acc, pid, st, ws_ptr, cnt_ptr, PIECES: gl.constexpr):
    """Store this program's float32 piece of stream-K tile st (transposed, [BLOCK_M, BLOCK_N]: the
    combining program reads it along N, coalesced) in its slot (slot p: program p computes piece
    p mod PIECES of tile p / PIECES) and count it in. Returns whether it was the tile's last piece to
    arrive (this program then combines them all, its own from the slot)."""
    BLOCK_N: gl.constexpr = acc.shape[0]
    BLOCK_M: gl.constexpr = acc.shape[1]
    layout: gl.constexpr = acc.type.layout
    rows = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, layout))
    gl.store(ws_ptr + pid.to(gl.int64) * (BLOCK_N * BLOCK_M) + cols[None, :] * BLOCK_N + rows[:, None], acc)
    # Every thread's stores are issued before the one thread's release (CTA barrier, then the
    # gpu-scope acq_rel atomic); the counter's acquire orders the combining loads after the other
    # programs' releases.
    gl.thread_barrier()
    arrived = gl.atomic_add(cnt_ptr + st, 1, sem="acq_rel", scope="gpu")
    return arrived == PIECES - 1


@gluon.jit
def _sk_finish(own, use_own, pid, scale_ptr, bias_ptr, y_ptr, ws_ptr, M, N, stride_ym, off_m, off_n, st,
               HAS_SCALE: gl.constexpr, HAS_BIAS: gl.constexpr, BLOCK_M: gl.constexpr,
               BLOCK_N: gl.constexpr, PIECES: gl.constexpr, num_warps: gl.constexpr):
    """The tile's output from its PIECES pieces: per CHUNK x rows, every piece's float32 block is
    loaded at once (PIECES loads in flight, 16-byte along N; ``use_own``: this program's piece from
    the shared buffer ``own`` [BLOCK_M, BLOCK_N] instead of its slot) and summed from zero in piece
    order — the same float32 sum whichever program combines, so runs are bit-identical — then
    scaled, biased, rounded once and stored along y's rows (as :func:`_store_tile_transposed`)."""
    CHUNK: gl.constexpr = min(128 if PIECES <= 2 else 64, BLOCK_M)  # PIECES x CHUNK x BLOCK_N / threads in flight
    layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 4], threads_per_warp=[32 * 4 // BLOCK_N, BLOCK_N // 4],
                                            warps_per_cta=[num_warps, 1], order=[1, 0])
    offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
    n_ok = offs_n < N
    if HAS_SCALE:
        sc = gl.load(scale_ptr + offs_n, mask=n_ok, other=0.0).to(gl.float32)
    if HAS_BIAS:
        bi = gl.load(bias_ptr + offs_n, mask=n_ok, other=0.0).to(gl.float32)
    first = st * PIECES
    tile_off = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, layout))[:, None] * BLOCK_N \
        + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))[None, :]
    for c in gl.static_range(0, BLOCK_M, CHUNK):
        if use_own:
            mine = own.slice(c, CHUNK).load(layout)
        y = gl.zeros((CHUNK, BLOCK_N), gl.float32, layout)
        for i in gl.static_range(PIECES):
            p = first + i
            part = gl.load(ws_ptr + p.to(gl.int64) * (BLOCK_N * BLOCK_M) + c * BLOCK_N + tile_off,
                           mask=(p != pid) | (not use_own), other=0.0, cache_modifier=".cg")
            if use_own:
                part = gl.where(p == pid, mine, part)
            y += part
        if HAS_SCALE:
            y = y * sc[None, :]
        if HAS_BIAS:
            y = y + bi[None, :]
        offs_m = off_m + c + gl.arange(0, CHUNK, layout=gl.SliceLayout(1, layout))
        ptrs = y_ptr + offs_m.to(gl.int64)[:, None] * stride_ym + offs_n[None, :]
        gl.store(ptrs, y.to(y_ptr.dtype.element_ty), mask=(offs_m < M)[:, None] & n_ok[None, :])


@gluon.jit
def _sk_piece(acc, pid, st, last_unit, x_ring, scale_ptr, bias_ptr, y_ptr, ws_ptr, cnt_ptr, M, N,
              stride_ym, off_m, off_n, HAS_SCALE: gl.constexpr, HAS_BIAS: gl.constexpr, PIECES: gl.constexpr,
              num_warps: gl.constexpr):
    """A stream-K piece of tile st (its sum in ``acc``). When it is its program's last unit (the ring
    idle) and every other piece is already counted in, it is not stored at all: the sum goes to the
    ring's shared memory and this program combines at once. Otherwise the piece is stored and
    counted, and the last to arrive combines (:func:`_sk_store_piece`)."""
    BLOCK_N: gl.constexpr = acc.shape[0]
    BLOCK_M: gl.constexpr = acc.shape[1]
    # the x ring (16-bit) can hold the float32 sum: STAGES x BLOCK_K x 2 bytes >= BLOCK_N x 4
    OWN_FITS: gl.constexpr = x_ring.numel * 2 >= BLOCK_N * BLOCK_M * 4
    _grid_wait()  # the counters were zeroed by the previous grid
    seen = gl.atomic_add(cnt_ptr + st, 0, sem="acquire", scope="gpu")
    if OWN_FITS and last_unit & (seen == PIECES - 1):
        # the ring is idle (the program's last unit); [BLOCK_M, BLOCK_N], N contiguous in 16-byte units
        # swizzled by row: the combine's 16-byte reads along N and the accumulator's transposed
        # stores (lanes 8 rows apart) fall in distinct banks
        own = x_ring._reinterpret(gl.float32, [BLOCK_M, BLOCK_N],
                                  gl.SwizzledSharedLayout(vec=4, per_phase=1, max_phase=8, order=[1, 0]))
        gl.thread_barrier()  # each warpgroup waited for its own wgmmas only: the other's may still read x
        own.store(gl.permute(acc, (1, 0)))
        gl.thread_barrier()
        _sk_finish(own, True, pid, scale_ptr, bias_ptr, y_ptr, ws_ptr, M, N, stride_ym, off_m, off_n, st,
                   HAS_SCALE, HAS_BIAS, BLOCK_M, BLOCK_N, PIECES, num_warps)
    elif _sk_store_piece(acc, pid, st, ws_ptr, cnt_ptr, PIECES):
        _sk_finish(x_ring, False, pid, scale_ptr, bias_ptr, y_ptr, ws_ptr, M, N, stride_ym, off_m, off_n, st,
                   HAS_SCALE, HAS_BIAS, BLOCK_M, BLOCK_N, PIECES, num_warps)


@gluon.jit
def _wo_rs_kernel(x_desc, w_desc, scale_ptr, z_ptr, bias_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, K, GROUPS, stride_ym,
                  DP_TILES, SK_TILES, SK_LEN, INT4: gl.constexpr, HAS_BIAS: gl.constexpr, GROUP_M: gl.constexpr,
                  STAGES: gl.constexpr, GROUP_SIZE: gl.constexpr, INSTR_N: gl.constexpr, P_LAYOUT: gl.constexpr,
                  STREAM_K: gl.constexpr, SK_PIECES: gl.constexpr, P3_LAYOUT: gl.constexpr, num_warps: gl.constexpr):
    """The register-operand kernel (module docstring), int8 or packed int4 (INT4: [BLOCK_N, BLOCK_K / 2]
    byte tiles; the group's zero-point and scale applied in the conversion; GROUP_SIZE a multiple of BLOCK_K,
    or with P3_LAYOUT a divisor of it, BLOCK_K / GROUP_SIZE groups a step). A program computes tiles program_id, program_id + nprog,
    ... < DP_TILES (persistent when the grid is smaller than the tile count), then (STREAM_K) its
    range of SK_LEN steps of the last SK_TILES tiles' K steps, one of a tile's SK_PIECES pieces
    (module docstring, "Stream-K"). Its steps are numbered across its units: the TMA ring runs on
    across their boundaries, so the next unit's first loads are in flight during this unit's last
    steps and store."""
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    dtype: gl.constexpr = x_desc.dtype

    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    num_k = gl.cdiv(K, 2 * BLOCK_K) * 2  # even (the loop is unrolled by two); TMA zero-fills a step past K
    n_dp = (DP_TILES - pid + nprog - 1) // nprog
    if STREAM_K:
        sk_lo = gl.minimum(pid * SK_LEN, SK_TILES * num_k)
        sk_hi = gl.minimum(sk_lo + SK_LEN, SK_TILES * num_k)
        n_units = n_dp + gl.where(sk_lo < sk_hi, (sk_hi - 1) // num_k - sk_lo // num_k + 1, 0)
        total = n_dp * num_k + sk_hi - sk_lo
    else:
        sk_lo = 0
        sk_hi = 0
        n_units = n_dp
        total = n_dp * num_k

    x_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], x_desc.layout)
    w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    tile, kb, nk, g0 = _unit(0, pid, nprog, n_dp, DP_TILES, sk_lo, sk_hi, num_k, STREAM_K)
    ntile, nkb, nnk, ng0 = _unit(1, pid, nprog, n_dp, DP_TILES, sk_lo, sk_hi, num_k, STREAM_K)
    off_m, off_n = _tile_offsets(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    noff_m, noff_n = _tile_offsets(ntile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    for i in gl.static_range(STAGES):
        _rs_refill(i, i, kb, nk, nkb, off_m, off_n, noff_m, noff_n, total, x_desc, w_desc, x_ring, w_ring, ready,
                   True, STAGES)

    # Y^T [BLOCK_N, BLOCK_M]: the warps split the weight rows (64 per warpgroup per instruction),
    # each wgmma covers INSTR_N x rows.
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, INSTR_N, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=2)
    for u in range(n_units):
        tile, kb, nk, g0 = _unit(u, pid, nprog, n_dp, DP_TILES, sk_lo, sk_hi, num_k, STREAM_K)
        off_m, off_n = _tile_offsets(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        # The next unit's origin, for refills that run past this unit's last step (computed once per
        # unit: the tile order's integer divisions cost ~100 instructions).
        ntile, nkb, nnk, ng0 = _unit(u + 1, pid, nprog, n_dp, DP_TILES, sk_lo, sk_hi, num_k, STREAM_K)
        noff_m, noff_n = _tile_offsets(ntile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        if INT4:
            if P3_LAYOUT is not None:  # [rows, groups] of scales a step: rows in that view's layout
                offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, gl.SliceLayout(2, P3_LAYOUT)))
            else:
                offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, P_LAYOUT))
            row_ok = offs_n < N
            s_rows = scale_ptr + offs_n * GROUPS
            z_rows = z_ptr + offs_n * GROUPS
        else:
            row_ok = True
            s_rows = scale_ptr
            z_rows = z_ptr
        zm, s = _rs_group(kb, s_rows, z_rows, row_ok, K, dtype, BLOCK_K, GROUP_SIZE, INT4, P3_LAYOUT)
        # int4: where a group is two or more K steps (a power of two; units start at even steps), an odd step
        # never starts one, so only the steps before even steps load the next group's zero-points and scales.
        # Each of those loads (address, mask and the wait for its result) was ~20 instructions a step on the
        # critical path: 3-8 % of the int4 GEMM at M >= 1024 (notes/int4_weight_only.md, round 9). Where a group
        # is a step or less (several a step with P3_LAYOUT), every step loads its own.
        EVERY_STEP: gl.constexpr = GROUP_SIZE <= BLOCK_K
        acc = gl.zeros((BLOCK_N, BLOCK_M), gl.float32, mma_layout)
        # The unit's first step with use_acc=False: the accumulator entering the loop is defined by a
        # wgmma (C7515). Its retire refills the slot of the previous unit's last step (the first
        # unit's slots were all filled above, so not in the first unit).
        acc, a0, zm, s = _rs_step(g0, kb, acc, zm, s, s_rows, z_rows, row_ok, K, x_ring, w_ring, ready,
                                  False, a_layout, P_LAYOUT, STAGES, GROUP_SIZE, INT4, EVERY_STEP, P3_LAYOUT)
        acc = _rs_retire(g0, 0, kb, nk, nkb, off_m, off_n, noff_m, noff_n, total, acc, x_desc, w_desc, x_ring,
                         w_ring, ready, u > 0, STAGES)
        # Two steps per trip, each with its own A registers (a1, a0): a step's conversion never
        # writes the registers of the wgmma still in flight. Units are an even number of steps.
        for k in range(1, nk - 1, 2):
            acc, a1, zm, s = _rs_step(g0 + k, kb + k, acc, zm, s, s_rows, z_rows, row_ok, K, x_ring,
                                      w_ring, ready, True, a_layout, P_LAYOUT, STAGES, GROUP_SIZE, INT4, True,
                                      P3_LAYOUT)
            acc = _rs_retire(g0 + k, k, kb, nk, nkb, off_m, off_n, noff_m, noff_n, total, acc, x_desc, w_desc,
                             x_ring, w_ring, ready, True, STAGES)
            acc, a0, zm, s = _rs_step(g0 + k + 1, kb + k + 1, acc, zm, s, s_rows, z_rows, row_ok, K,
                                      x_ring, w_ring, ready, True, a_layout, P_LAYOUT, STAGES, GROUP_SIZE, INT4,
                                      EVERY_STEP, P3_LAYOUT)
            acc = _rs_retire(g0 + k + 1, k + 1, kb, nk, nkb, off_m, off_n, noff_m, noff_n, total, acc, x_desc,
                             w_desc, x_ring, w_ring, ready, True, STAGES)
        acc, a1, zm, s = _rs_step(g0 + nk - 1, kb + nk - 1, acc, zm, s, s_rows, z_rows, row_ok, K,
                                  x_ring, w_ring, ready, True, a_layout, P_LAYOUT, STAGES, GROUP_SIZE, INT4, False,
                                  P3_LAYOUT)
        # Every step but the program's first refills the slot of the step before it, the last step of
        # a unit included (the next unit's loads): each step is loaded exactly once.
        acc = _rs_retire(g0 + nk - 1, nk - 1, kb, nk, nkb, off_m, off_n, noff_m, noff_n, total, acc, x_desc,
                         w_desc, x_ring, w_ring, ready, True, STAGES)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        if STREAM_K:
            whole = nk == num_k
            if whole:
                _store_tile_transposed(acc, scale_ptr, bias_ptr, y_ptr, M, N, stride_ym, off_m, off_n, not INT4,
                                       HAS_BIAS, BLOCK_M, BLOCK_N, num_warps)
            else:
                _sk_piece(acc, pid, tile - DP_TILES, u == n_units - 1, x_ring, scale_ptr, bias_ptr,
                          y_ptr, ws_ptr, cnt_ptr, M, N, stride_ym, off_m, off_n, not INT4, HAS_BIAS, SK_PIECES,
                          num_warps)
        else:
            _store_tile_transposed(acc, scale_ptr, bias_ptr, y_ptr, M, N, stride_ym, off_m, off_n, not INT4, HAS_BIAS,
                                   BLOCK_M, BLOCK_N, num_warps)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))


@functools.lru_cache(maxsize=None)
def packed_a_layout(block_n: int, block_k: int, num_warps: int):
    """The layout of packed int4 bytes [block_n, block_k / 2] whose two nibbles are, once unpacked and
    joined, exactly the registers of a 16-bit wgmma A fragment (k_width 2) of [block_n, block_k]:
    per warp 16 rows; lane = 4·r + c holds rows r and r + 8 and, in each 16-column block, the pairs
    (2c, 2c + 1) and (2c + 8, 2c + 9), i.e. bytes c and c + 4 of each 8-byte chunk; warps stack rows."""
    reg = [[8, 0], [0, 4]]
    j = 8
    while j < block_k // 2:
        reg.append([0, j])
        j *= 2
    r = 16 * num_warps
    while r < block_n:
        reg.append([r, 0])
        r *= 2
    lane = [[0, 1], [0, 2], [1, 0], [2, 0], [4, 0]]
    warp = [[16 << i, 0] for i in range(num_warps.bit_length() - 1)]
    return gl.DistributedLinearLayout(reg_bases=reg, lane_bases=lane, warp_bases=warp, block_bases=[],
                                      shape=[block_n, block_k // 2])


@functools.lru_cache(maxsize=None)
def packed_a_layout3(block_n: int, block_k: int, num_warps: int, groups: int):
    """:func:`packed_a_layout` viewed as [block_n, groups, block_k / 2 / groups]: a K step of ``groups`` groups, the
    bytes of group j in [:, j, :]. Every column basis of the 2-D layout is a power of two, so it falls in one of the
    two new dimensions; the group bits are register bits (the fragment's 16-column blocks), so each thread holds
    whole groups' columns and the view moves no data."""
    flat = packed_a_layout(block_n, block_k, num_warps)
    cols = block_k // 2 // groups
    if groups < 2 or cols < 8:
        raise ValueError(f"packed_a_layout3: {groups} groups of {2 * cols} columns in a {block_k}-deep step "
                         f"(at least 2 groups of 16 columns)")

    def split(bases):
        return [[r, c // cols, 0] if c >= cols else [r, 0, c] for r, c in bases]

    return gl.DistributedLinearLayout(reg_bases=split(flat.reg_bases), lane_bases=split(flat.lane_bases),
                                      warp_bases=split(flat.warp_bases), block_bases=[],
                                      shape=[block_n, groups, cols])


_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}
_wo_rs_fast = cached(_wo_rs_kernel)


@functools.lru_cache(maxsize=None)
def _is_sm90(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] == 9


_SMEM_BYTES = 232448  # what one CTA may use on sm_90


def check_config(cfg: dict, family: str, weight_bits: int = 8) -> None:
    """Raise ValueError naming ``family`` for a ``tma_wgmma`` config this kernel cannot compile or run
    (``weight_bits`` 8, or 4 for packed int4 weight tiles of BLOCK_K / 2 bytes a row):
    BLOCK_M x rows a power of two in [16, 256] (one wgmma instruction's N), num_warps 4 or 8 (whole
    warpgroups), BLOCK_N a multiple of 16 x num_warps (16 weight rows per warp), BLOCK_K a power of
    two in [32, 256], num_stages >= 2 (the ring refills the slot of the step before), the ring within
    an H100 CTA's shared memory, PERSISTENT and STREAM_K booleans."""
    def bad(why: str):
        raise ValueError(f"{family} tma_wgmma config: {why}, got {cfg!r}")

    ints = {k: cfg.get(k) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")}
    if any(not isinstance(v, int) or isinstance(v, bool) for v in ints.values()):
        bad("BLOCK_M, BLOCK_N, BLOCK_K, num_warps and num_stages must be ints")
    bm, bn, bk, warps, stages = ints.values()
    if bm not in (16, 32, 64, 128, 256):
        bad("BLOCK_M must be a power of two in [16, 256]")
    if warps not in (4, 8):
        bad("num_warps must be 4 or 8 (whole warpgroups)")
    if bn < 16 * warps or bn % (16 * warps):
        bad(f"BLOCK_N must be a multiple of 16 x num_warps = {16 * warps}")
    if bk not in (32, 64, 128, 256):
        bad("BLOCK_K must be a power of two in [32, 256]")
    if stages < 2:
        bad("num_stages must be >= 2")
    if stages * (bm * bk * 2 + bn * bk * weight_bits // 8) > _SMEM_BYTES:
        bad(f"the ring (num_stages x the x and weight tiles) must fit {_SMEM_BYTES} bytes of shared memory")
    if any(not isinstance(cfg.get(k, False), bool) for k in ("PERSISTENT", "STREAM_K")):
        bad("PERSISTENT and STREAM_K must be booleans")


def mid_m_config(M: int, N: int, K: int, num_sms: int = 132) -> dict:
    """The config for 16 < M <= 256 where no tuned entry exists (both weight widths; the H100's SM count
    by default, as the other heuristics). To M = 128: where 128-row weight tiles fill at least half the SMs,
    128 weight rows a program; else 64, and the few tiles cut along K (stream-K's split). In the H100 sweep
    over M = 32-256 on the three Llama shapes, int8 and int4 (notes/int8_weight_only.md, round 20), that
    was within 10 % of the best candidate in all 24 problems.

    Past M = 128, 256 x rows and 128 weight rows a tile where such tiles fill 70 % of the SMs, or where K is
    long (>= 8192) and there are at least 24 of them; else 128 x 64 tiles. The round-20 rule took 256 x 128
    tiles from N = 4224 on, which left 40-64 tiles at 5120² and 8192 x 2048 (int4 41.5 / 28.4 µs against
    37.0 / 23.6 for 128 x 64) and kept 3584 x 18944 on 128 x 64 (83.0 against 69.4 µs); big tiles on a long K
    at 2048 x 8192 (16 tiles) and small ones at 8192² and 12288 x 4096 were slower (notes/int4_weight_only.md,
    round 33)."""
    bm = 64 if M <= 64 else 128
    cfg = {"kernel": "tma_wgmma", "BLOCK_M": bm, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 4,
           "num_stages": 4, "PERSISTENT": True, "STREAM_K": True}
    if M > 128:
        big_tiles = ceil_div(M, 256) * ceil_div(N, 128)
        if 10 * big_tiles >= 7 * num_sms or (K >= 8192 and big_tiles >= 24):
            cfg.update(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, num_warps=8)
    elif 2 * ceil_div(N, 128) * ceil_div(M, bm) >= num_sms:
        cfg.update(BLOCK_N=128, num_warps=8)
    return cfg


def large_m_config(M: int, N: int, K: int, num_sms: int = 132) -> dict:
    """The config for M > 256 where no tuned entry exists (both weight widths): 256 x rows and 128 weight
    rows a tile, 64-deep K steps, 4 stages; persistent with the last wave cut along K where that wave is at
    most half full (:func:`stream_k_split`), else one program a tile. In the H100 sweep on shapes of other
    models (notes/int8_weight_only.md, round 33) the stream-K form was the fastest candidate where it applies
    (5120² and 512 x 2048 at M = 2048, 3584 x 18944 at M = 4096); where the last wave is fuller, the plain grid
    was as fast (as in the tuned Llama entries at M = 2048-4096). With it, int8 weights on 13 such shapes at
    M = 2048 ran 0.92-1.02x of bf16 eagerly, against 0.84-0.96x with the plain grid alone."""
    cfg = {"kernel": "tma_wgmma", "BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8,
           "num_stages": 4, "PERSISTENT": True, "STREAM_K": True}
    if stream_k_split(M, N, K, cfg, num_sms) is None:
        del cfg["PERSISTENT"], cfg["STREAM_K"]
    return cfg


#: 128 x rows and 128 weight rows a tile, 128-deep K steps, persistent with stream-K: where 256-row tiles would leave
#: the last one mostly padding (:func:`fit_rows`)
ROWS_128_CONFIG = {"kernel": "tma_wgmma", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8,
                   "num_stages": 4, "PERSISTENT": True, "STREAM_K": True}


def fit_rows(config: dict, M: int) -> dict:
    """A large-M config (tuned at M = 1024, 2048, 4096: tables are keyed by M's power-of-two bucket) made fit for M
    between those: with 256 x rows a tile, M = 530 computes 768 rows. Where M % 256 is 1-128 and M < 2048, 128-row
    tiles (:data:`ROWS_128_CONFIG`) pad to a multiple of 128 instead. Measured on an H100 (GPU time from CUDA graphs,
    int8 and int4 weights, 4096², 14336 x 4096, 4096 x 14336; notes/int8_weight_only.md, round 39): at M = 300, 384,
    530, 600, 1100 and 1300 faster in 29 of 36 problems (by 4-52 %), within 3 % in 6, 4 % slower in one (int4 4096² M
    = 600); at M = 700 and 768 (the last tile more than half full) and at M = 2100 (10 % padding) the 256-row tiles
    stayed ahead of 128-row tiles in 15 of 18 (behind by 2-7 % in int8 at M = 2100 on 4096 x 14336 and 4096², int4 at
    M = 768 on 4096 x 14336), so they are kept there."""
    if config.get("BLOCK_M") != 256 or config.get("kernel") != "tma_wgmma" or not 256 < M < 2048 \
            or not 0 < M % 256 <= 128:
        return config
    return ROWS_128_CONFIG


def usable(x: torch.Tensor, weight_q: torch.Tensor) -> bool:
    """Whether the kernel can take x and the weight's bytes [N, K] (int8) or [N, K / 2] (packed int4):
    see the module docstring's requirements."""
    return (x.is_cuda and x.dtype in _GL_DTYPES and _is_sm90(x.device.index or 0)
            and x.stride(1) == 1 and (x.stride(0) * x.element_size()) % 16 == 0 and x.data_ptr() % 16 == 0
            and weight_q.is_contiguous() and weight_q.shape[1] % 16 == 0 and weight_q.data_ptr() % 16 == 0)


@functools.lru_cache(maxsize=None)
def _smem_layout(rows: int, cols: int, dtype):
    return gl.NVMMASharedLayout.get_default_for([rows, cols], dtype)


def descriptors(x: torch.Tensor, weight_q: torch.Tensor, block_m: int, block_n: int, block_k: int):
    x_layout = _smem_layout(block_m, block_k, _GL_DTYPES[x.dtype])
    w_layout = _smem_layout(block_n, block_k, gl.int8)
    return (TensorDescriptor(x, list(x.shape), list(x.stride()), [block_m, block_k], x_layout),
            TensorDescriptor(weight_q, list(weight_q.shape), list(weight_q.stride()), [block_n, block_k], w_layout))


def launch(x, weight_q, weight_scale, bias, cfg: dict) -> torch.Tensor:
    """``x @ weight_q^T * weight_scale (+ bias)`` in one launch of the kernel (two with stream-K: the
    counters' zeroing first), through :func:`quantkit.kernels.launch.cached` (Triton's own launch path
    costs this kernel 100-500 µs of host time, more than its GPU time at M = 1024). Launch plans
    replay it like any other launch: the host TMA descriptors are rebuilt there on the new addresses
    (quantkit.kernels.plan). Returns the output, [M, N] in x.dtype."""
    M, K = x.shape
    N = weight_q.shape[0]
    bm, bn, bk = int(cfg["BLOCK_M"]), int(cfg["BLOCK_N"]), int(cfg["BLOCK_K"])
    x_desc, w_desc = descriptors(x, weight_q, bm, bn, bk)
    return _launch_rs(x, x_desc, w_desc, weight_scale, None, bias, M, N, K, 1, bk, cfg)


@functools.lru_cache(maxsize=None)
def _num_sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def k_steps(K: int, block_k: int) -> int:
    """The K steps a tile takes: rounded up to an even count (the kernel's loop is unrolled by two; TMA
    zero-fills a step past K), as the kernel computes its num_k."""
    return 2 * ceil_div(K, 2 * block_k)


def _ring_stages(cfg: dict, num_k: int) -> int:
    return min(int(cfg["num_stages"]), num_k + 1)  # a refill reaches at most into the next unit


def stream_k_split(M: int, N: int, K: int, cfg: dict, num_sms: int, block_k: int | None = None
                   ) -> tuple[int, int, int] | None:
    """(dp_tiles, sk_tiles, sk_len) when ``cfg`` asks for stream-K (``STREAM_K``, persistent) and the
    last wave is at most half full: the first dp_tiles tiles (whole waves) are computed whole, and the
    K steps of the last sk_tiles tiles are dealt out in ranges of sk_len steps, one per program.
    sk_len divides the tile's K steps, so every range is one piece of one tile (one store or one
    combine per program, no program cut twice); it is the shortest such length that the programs can
    cover, even (the loop is unrolled by two), at least STAGES - 1 (a refill never skips a unit) and
    at least num_k / SK_MAX_PIECES. ``block_k``: the K step the kernel runs (int4 clamps BLOCK_K to the
    group size; default the config's). None: plain persistent tiles (a last wave more than half full
    gains less than the pieces cost: notes/int8_weight_only.md, round 8), or tiles the combine does not
    take (BLOCK_N over 128: 4 N-lanes a thread; BLOCK_M not a multiple of 64)."""
    if not (cfg.get("STREAM_K") and cfg.get("PERSISTENT")) or int(cfg["BLOCK_N"]) > 128 \
            or int(cfg["BLOCK_M"]) % 64:
        return None
    tiles = ceil_div(M, int(cfg["BLOCK_M"])) * ceil_div(N, int(cfg["BLOCK_N"]))
    # With fewer tiles than half the SMs (M = 128 at N = 4096: 32-64 tiles) there is no whole wave:
    # every tile is cut, which is split-K with the pieces combined in the kernel.
    sk_tiles = tiles % num_sms
    if sk_tiles == 0 or 2 * sk_tiles > num_sms:
        return None
    num_k = k_steps(K, block_k or int(cfg["BLOCK_K"]))
    least = max(ceil_div(sk_tiles * num_k, num_sms), ceil_div(num_k, SK_MAX_PIECES.value),
                _ring_stages(cfg, num_k) - 1)
    for sk_len in range(least, num_k):
        if num_k % sk_len == 0 and sk_len % 2 == 0:
            return tiles - sk_tiles, sk_tiles, sk_len
    return None


def grid_programs(tiles: int, num_sms: int, num_k: int, split: tuple[int, int, int] | None, persistent: bool) -> int:
    """The kernel's grid: one program a tile, or with ``persistent`` at most one an SM; with a stream-K
    ``split`` (:func:`stream_k_split`) enough programs for the whole tiles' waves and for one piece each
    (all the SMs when there are whole waves, else exactly the pieces)."""
    if split is None:
        return min(tiles, num_sms) if persistent else tiles
    dp_tiles, sk_tiles, sk_len = split
    return min(num_sms, max(dp_tiles, sk_tiles * (num_k // sk_len)))


def _launch_rs(x, x_desc, w_desc, scale, zero, bias, M, N, K, groups: int, group_size: int, cfg: dict):
    """The register-operand kernel; ``zero`` None: int8 weights (per-channel scale in the epilogue),
    else packed int4 (group-wise zero-point and scale in the conversion). ``PERSISTENT``: one program
    per SM, each looping over its tiles; ``STREAM_K`` (:func:`stream_k_split`): the output's allocation
    also holds the pieces' float32 sums (a BLOCK_N x BLOCK_M slot per piece) and the tiles' arrival
    counters, which a one-program kernel zeroes first; the GEMM is launched as its programmatic
    dependent (its programs start as soon as that kernel has triggered) and waits for it
    (``griddepcontrol.wait``) only before its first count."""
    bm, bn = int(cfg["BLOCK_M"]), int(cfg["BLOCK_N"])
    bk = x_desc.block_shape[1]
    warps = int(cfg["num_warps"])
    int4 = zero is not None
    tiles = ceil_div(M, bm) * ceil_div(N, bn)
    sms = _num_sms(x.device.index or 0)
    split = stream_k_split(M, N, K, cfg, sms, bk)
    num_k = k_steps(K, bk)
    grid = (grid_programs(tiles, sms, num_k, split, bool(cfg.get("PERSISTENT"))),)
    opts = {}
    if split is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
        ws = cnt = out
        dp_tiles, sk_tiles, sk_len = tiles, 0, 0
    else:
        dp_tiles, sk_tiles, sk_len = split
        slots = sk_tiles * (num_k // sk_len) * bn * bm * 4  # a float32 tile per piece
        out, work = out_with_workspace(M, N, x.dtype, x.device, slots + 4 * sk_tiles)
        ws, cnt = work[:slots].view(torch.float32), work[slots:].view(torch.int32)
        zero_int32(cnt, launch_dependents=True)
        opts["launch_pdl"] = True
    _wo_rs_fast[grid](x_desc, w_desc, scale, zero if int4 else scale, bias if bias is not None else scale, out,
                      ws, cnt, M, N, K, groups, out.stride(0), dp_tiles, sk_tiles, sk_len,
                      INT4=int4, HAS_BIAS=bias is not None, GROUP_M=int(cfg.get("GROUP_M", 8)),
                      STAGES=_ring_stages(cfg, num_k), GROUP_SIZE=group_size, INSTR_N=min(bm, 256),
                      P_LAYOUT=packed_a_layout(bn, bk, warps) if int4 else None, STREAM_K=split is not None,
                      SK_PIECES=num_k // sk_len if split is not None else 1,
                      P3_LAYOUT=packed_a_layout3(bn, bk, warps, bk // group_size) if int4 and bk > group_size else None,
                      num_warps=warps, **opts)
    return out


def int4_step(block_k: int, group_size: int) -> int:
    """The int4 kernel's K step for a config's ``block_k``: the config's where it holds whole groups of at least 16
    columns (block_k / group_size of them a step, :func:`packed_a_layout3`), else min(block_k, group_size)."""
    if 16 <= group_size < block_k and block_k % group_size == 0:
        return block_k
    return min(block_k, group_size)


def usable_int4(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, group_size: int, block_k: int) -> bool:
    """Whether the int4 kernel can take the problem: as :func:`usable`, plus scales in x's dtype (the
    conversion multiplies in it, one rounding), the packed rows 16-byte aligned (K % 32 == 0) and
    whole groups per K step or whole steps per group (:func:`int4_step`)."""
    bk = int4_step(block_k, group_size)
    return (usable(x, packed) and scale.dtype == x.dtype and bk >= 32
            and (group_size % bk == 0 or bk % group_size == 0))


def launch_int4(x, packed, scale, zero, bias, group_size: int, cfg: dict) -> torch.Tensor:
    """``x @ dequant(packed, scale, zero)^T (+ bias)`` by the int4 kernel (the weight rounded once to
    x.dtype, as the reference's); see :func:`launch` for the host side. Returns the output."""
    M, K = x.shape
    N = packed.shape[0]
    bm, bn = int(cfg["BLOCK_M"]), int(cfg["BLOCK_N"])
    bk = int4_step(int(cfg["BLOCK_K"]), group_size)
    warps = int(cfg["num_warps"])
    x_desc = TensorDescriptor(x, list(x.shape), list(x.stride()), [bm, bk], _smem_layout(bm, bk, _GL_DTYPES[x.dtype]))
    w_desc = TensorDescriptor(packed, list(packed.shape), list(packed.stride()), [bn, bk // 2],
                              _smem_layout(bn, bk // 2, gl.uint8))
    return _launch_rs(x, x_desc, w_desc, scale, zero, bias, M, N, K, scale.shape[1], group_size, cfg)
