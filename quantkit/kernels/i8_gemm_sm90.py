"""int8 × int8 GEMM for int8-dynamic at large M on sm_90, written in Gluon: y = (f32(x_q @ w_q^T) ·
x_scale[m]) · w_scale[n] (+ bias[n]), one rounding to y's dtype.

Why Gluon. Triton 3.6 does not keep an int8 wgmma in flight across K steps: for ``tl.dot`` on int8
operands its pipeliner waits for each step's wgmma to finish (``wgmma.wait_group 0``) before it refills
a ring slot and issues the next, where for fp16 and fp8 it waits only for the previous one
(``wait_group 1``; checked on the PTX, notes/int8_dynamic.md, round 11). Every K step then drains the
tensor-core pipeline. Here the loop says what it means:

* x-code tiles [BLOCK_M, BLOCK_K] and weight tiles [BLOCK_N, BLOCK_K] arrive by TMA in a ring of
  STAGES slots, one mbarrier each (TMA zero-fills rows and columns past M, N and K);
* step k waits for its slot, issues the wgmma asynchronously and waits for step k - 1's wgmma only
  (``num_outstanding=1``), so the tensor cores always have the next step queued;
* after a CTA barrier (both warpgroups read every weight tile, and each waits only for its own
  wgmmas) step k - 1's slot is retired everywhere and takes tile k + STAGES - 1: up to STAGES - 1
  tiles are loaded or in flight ahead of the one being multiplied.

A second kernel (:func:`launch_ws`, mode ``gluon_ws``) splits the same loop over warps
(``gl.warp_specialize``): a load warp fills the ring, and two consumer warpgroups, each on its own half
of the tile's rows, issue the wgmmas and release the slots through mbarriers; the grid is persistent (a
program per SM), so the ring fills with the next tile's steps while the consumers store the last one.
On the H100 (round 12 probe) it is within a few % of the kernel above at 128 × 256 tiles, and 10 %
faster with 128 × 128 tiles at 14336 × 4096, M = 1024. With ``EPI="tma"`` each consumer hands its
finished half tile to a TMA store from its own shared-memory buffer and goes straight on to the next
tile's K loop (the row stores held it until they had issued): 0.3-6 % faster layers at M = 1024-4096
(round 17 probe), the shipped choice at 4096², 14336 × 4096 and the K/V projection at M ≥ 1024.

Split-K (``SPLIT_K`` > 1, plain kernel only; grid (tiles, splits)): each split multiplies its own range of
K steps and stores its raw int32 sums in a workspace [splits, M, N], which the family's Triton reduction
sums (exactly, in any order) and scales: the pointer kernel's split-K with this kernel's K loop. At M = 128
and N = 4096 that cuts 32-64 tiles into 64-128 programs (notes/int8_dynamic.md, round 20).

Numerics: exact int32 accumulation in the tensor cores (|Σ| ≤ K·127² < 2³¹ for K < 133,000), then the
family's epilogue, in the same order and without FMA contraction (``enable_fp_fusion=False``), so the
output is bit-identical to the Triton kernels' on the same codes.

Requirements (:func:`usable`): sm_90, int8 codes with 16-byte-aligned base and row stride (the
workspace pads K to 16), a contiguous weight with K a multiple of 16.
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from quantkit.kernels.launch import cached
from quantkit.kernels.tiling import grouped_pid, split_plan
# griddepcontrol.wait (PDL), the sm_90 check, the SM count and the NVMMA tile layouts, as the weight-only
# GEMM has them
from quantkit.kernels.wo_gemm_sm90 import _SMEM_BYTES, _grid_wait, _is_sm90, _num_sms, _smem_layout
from quantkit.reference.common import ceil_div


@gluon.jit
def _issue(k, num_k, k0, a_desc, b_desc, a_ring, b_ring, ready, off_m, off_n, STAGES: gl.constexpr):
    """TMA loads of the program's K step k (the matrix's step k0 + k) into slot k % STAGES (nothing past
    the program's last step)."""
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    s = k % STAGES
    pred = k < num_k
    mbarrier.expect(ready.index(s), nbytes, pred=pred)
    tma.async_copy_global_to_shared(a_desc, [off_m, (k0 + k) * BLOCK_K], ready.index(s), a_ring.index(s), pred=pred)
    tma.async_copy_global_to_shared(b_desc, [off_n, (k0 + k) * BLOCK_K], ready.index(s), b_ring.index(s), pred=pred)


@gluon.jit
def _scaled(acc, a_scale_ptr, a_scale_off, b_scale_ptr, bias_ptr, M, N, off_m, off_n, HAS_BIAS: gl.constexpr):
    """The family's epilogue on an int32 tile at (off_m, off_n), in float32: (f32(acc) · x_scale[m]) ·
    w_scale[n] (+ bias[n]); the row scales are read as float32 from element ``a_scale_off``."""
    layout: gl.constexpr = acc.type.layout
    offs_m = off_m + gl.arange(0, acc.shape[0], layout=gl.SliceLayout(1, layout))
    offs_n = off_n + gl.arange(0, acc.shape[1], layout=gl.SliceLayout(0, layout))
    a_s = gl.load((a_scale_ptr + a_scale_off).to(gl.pointer_type(gl.float32)) + offs_m, mask=offs_m < M, other=0.0)
    b_s = gl.load(b_scale_ptr + offs_n, mask=offs_n < N, other=0.0)
    y = acc.to(gl.float32) * a_s[:, None] * b_s[None, :]
    if HAS_BIAS:
        y = y + gl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(gl.float32)[None, :]
    return y


@gluon.jit
def _store_rows(y, c_ptr, M, N, stride_cm, off_m, off_n, WARPS: gl.constexpr):
    """The float32 tile ``y`` at (off_m, off_n) rounded once to c's dtype and stored through shared
    memory in rows of 16-byte stores (stores straight from a wgmma layout measured 5-20 % slower)."""
    ROWS: gl.constexpr = y.shape[0]
    COLS: gl.constexpr = y.shape[1]
    VEC: gl.constexpr = 128 // c_ptr.dtype.element_ty.primitive_bitwidth  # 16 bytes a thread
    TPW_N: gl.constexpr = min(32, COLS // VEC)
    store_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, VEC], threads_per_warp=[32 // TPW_N, TPW_N],
                                                  warps_per_cta=[WARPS, 1], order=[1, 0])
    y = gl.convert_layout(y.to(c_ptr.dtype.element_ty), store_layout)
    rows = off_m + gl.arange(0, ROWS, layout=gl.SliceLayout(1, store_layout))
    cols = off_n + gl.arange(0, COLS, layout=gl.SliceLayout(0, store_layout))
    ptrs = c_ptr + rows.to(gl.int64)[:, None] * stride_cm + cols[None, :]
    gl.store(ptrs, y, mask=(rows < M)[:, None] & (cols < N)[None, :])


@gluon.jit
def _store_tma(y, c_desc, c_buf, off_m, off_n):
    """The float32 tile ``y`` at (off_m, off_n) rounded once to c's dtype and handed to a TMA store
    through ``c_buf`` (this warpgroup's own buffer): the warps go on to the next tile while the copy
    engine writes this one (TMA clips rows and columns past M and N). The previous tile's store must have
    left ``c_buf`` first; the caller waits for the last one before the program ends."""
    tma.store_wait(0)
    gl.thread_barrier()  # (each warp's copy was issued, and so is waited for, by one of its threads)
    c_buf.store(y.to(c_buf.dtype))
    fence_async_shared()  # the generic-proxy writes above, visible to the copy engine
    gl.thread_barrier()
    tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_buf)


@gluon.jit
def _i8_gemm_kernel(a_desc, b_desc, a_scale_ptr, a_scale_off, b_scale_ptr, bias_ptr, c_ptr, part_ptr, part_off,
                    M, N, K, stride_cm, K_ITERS, HAS_BIAS: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                    WAIT_PRIOR: gl.constexpr, SPLIT_K: gl.constexpr, num_warps: gl.constexpr):
    """Grid (tiles, SPLIT_K): split s multiplies K steps [s·K_ITERS, (s + 1)·K_ITERS). With SPLIT_K > 1 the
    raw int32 sums go to the partials [SPLIT_K, M, N] at byte ``part_off`` of ``part_ptr``, which the
    family's ``_splitk_reduce_kernel`` sums (exactly, in any order) and scales, as for its Triton GEMM."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    if WAIT_PRIOR:
        _grid_wait()
    pid_m, pid_n = grouped_pid(gl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N

    a_ring = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_ring = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    # This split's steps (K_ITERS = all of them without split-K). A split past K still takes one step:
    # TMA zero-fills it, so its partial sums are zeros.
    k0 = gl.program_id(1) * K_ITERS
    num_k = gl.maximum(gl.minimum(K_ITERS, gl.cdiv(K, BLOCK_K) - k0), 1)
    for i in gl.static_range(STAGES - 1):
        _issue(i, num_k, k0, a_desc, b_desc, a_ring, b_ring, ready, off_m, off_n, STAGES)

    # (Triton 3.6 lowers int8 wgmmas up to n = 128: a 256-wide tile is two of them.)
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, min(BLOCK_N, 128), 32])
    acc = gl.zeros((BLOCK_M, BLOCK_N), gl.int32, mma_layout)
    # Step 0 outside the loop with use_acc=False: the accumulator entering the loop is then defined by
    # a wgmma, not by the zero fill (ptxas serializes every wgmma otherwise, warning C7515).
    mbarrier.wait(ready.index(0), 0)
    acc = warpgroup_mma(a_ring.index(0), b_ring.index(0).permute((1, 0)), acc, use_acc=False, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))  # (returns at once: step 0 stays in flight)
    _issue(STAGES - 1, num_k, k0, a_desc, b_desc, a_ring, b_ring, ready, off_m, off_n, STAGES)
    for k in range(1, num_k):
        s = k % STAGES
        mbarrier.wait(ready.index(s), (k // STAGES) & 1)
        acc = warpgroup_mma(a_ring.index(s), b_ring.index(s).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        gl.thread_barrier()  # both warpgroups retired step k - 1: its slot takes step k + STAGES - 1
        _issue(k + STAGES - 1, num_k, k0, a_desc, b_desc, a_ring, b_ring, ready, off_m, off_n, STAGES)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))

    if SPLIT_K > 1:
        # this split's int32 sums, stored as they are (rows of 16-byte stores, as the outputs below)
        parts = (part_ptr + part_off).to(gl.pointer_type(gl.int32)) + gl.program_id(1).to(gl.int64) * M * N
        _store_rows(acc, parts, M, N, N, off_m, off_n, num_warps)
    else:
        # The family's epilogue, one rounding; the tile goes through shared memory (the ring's, free now).
        y = _scaled(acc, a_scale_ptr, a_scale_off, b_scale_ptr, bias_ptr, M, N, off_m, off_n, HAS_BIAS)
        _store_rows(y, c_ptr, M, N, stride_cm, off_m, off_n, num_warps)


@gluon.jit
def _ws_load_partition(a_desc, b_desc, a_ring, b_ring, ready, empty, M, N, K, GROUP_M: gl.constexpr,
                       WAIT_PRIOR: gl.constexpr):
    """One warp: every K step of each of the program's tiles into the next ring slot, once both
    consumers released it."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    STAGES: gl.constexpr = a_ring.shape[0]
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    num_k = gl.cdiv(K, BLOCK_K)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    if WAIT_PRIOR:
        _grid_wait()  # the activation codes come from the grid before this one
    it = 0
    for tile in range(gl.program_id(0), num_tiles, gl.num_programs(0)):
        pid_m, pid_n = grouped_pid(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        for k in range(num_k):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)  # (a fresh barrier passes parity 1)
            mbarrier.expect(ready.index(s), nbytes)
            tma.async_copy_global_to_shared(b_desc, [pid_n * BLOCK_N, k * BLOCK_K], ready.index(s), b_ring.index(s))
            tma.async_copy_global_to_shared(a_desc, [pid_m * BLOCK_M, k * BLOCK_K], ready.index(s), a_ring.index(s))
            it += 1


@gluon.jit
def _ws_mma_partition(a_ring, b_ring, ready, empty, a_scale_ptr, a_scale_off, b_scale_ptr, bias_ptr, c_ptr, c_desc,
                      c_buf, M, N, K, stride_cm, ROW0: gl.constexpr, HAS_BIAS: gl.constexpr, GROUP_M: gl.constexpr,
                      WAIT_PRIOR: gl.constexpr, EPI_TMA: gl.constexpr):
    """One warpgroup: rows ROW0 .. ROW0 + BLOCK_M / 2 - 1 of each of the program's tiles, one wgmma
    kept in flight across K steps; the epilogue while the load warp fills the ring for the next tile
    (``EPI_TMA``: stored by TMA from ``c_buf`` while the next tile's K loop runs)."""
    BLOCK_M: gl.constexpr = a_ring.shape[1]
    BLOCK_K: gl.constexpr = a_ring.shape[2]
    BLOCK_N: gl.constexpr = b_ring.shape[1]
    STAGES: gl.constexpr = a_ring.shape[0]
    ROWS: gl.constexpr = BLOCK_M // 2
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, min(BLOCK_N, 128), 32])
    num_k = gl.cdiv(K, BLOCK_K)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    if WAIT_PRIOR:
        _grid_wait()  # the epilogue reads the row scales the grid before this one writes
    acc = gl.zeros((ROWS, BLOCK_N), gl.int32, mma_layout)
    it = 0
    for tile in range(gl.program_id(0), num_tiles, gl.num_programs(0)):
        pid_m, pid_n = grouped_pid(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M + ROW0
        off_n = pid_n * BLOCK_N
        s = it % STAGES
        mbarrier.wait(ready.index(s), (it // STAGES) & 1)
        acc = warpgroup_mma(a_ring.index(s).slice(ROW0, ROWS), b_ring.index(s).permute((1, 0)), acc, use_acc=False,
                            is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        it += 1
        for k in range(1, num_k):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            acc = warpgroup_mma(a_ring.index(s).slice(ROW0, ROWS), b_ring.index(s).permute((1, 0)), acc,
                                is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            gl.thread_barrier()  # every warp of the group retired step k - 1: its slot is free
            mbarrier.arrive(empty.index((it - 1) % STAGES), count=1)
            it += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        gl.thread_barrier()
        mbarrier.arrive(empty.index((it - 1) % STAGES), count=1)

        y = _scaled(acc, a_scale_ptr, a_scale_off, b_scale_ptr, bias_ptr, M, N, off_m, off_n, HAS_BIAS)
        if EPI_TMA:
            _store_tma(y, c_desc, c_buf, off_m, off_n)
        else:
            _store_rows(y, c_ptr, M, N, stride_cm, off_m, off_n, 4)
    if EPI_TMA:
        tma.store_wait(0)  # c_buf stays this program's until the copy engine has read it


@gluon.jit
def _i8_gemm_ws_kernel(a_desc, b_desc, a_scale_ptr, a_scale_off, b_scale_ptr, bias_ptr, c_ptr, c_desc, M, N, K,
                       stride_cm, HAS_BIAS: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                       WAIT_PRIOR: gl.constexpr, CONSUMER_REGS: gl.constexpr, EPI_TMA: gl.constexpr,
                       num_warps: gl.constexpr):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    gl.static_assert(num_warps == 4, "the default partition is one consumer warpgroup")
    a_ring = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_ring = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrival from each consumer warpgroup
    ROW_LO: gl.constexpr = 0
    ROW_HI: gl.constexpr = BLOCK_M // 2
    if EPI_TMA:  # each consumer warpgroup's half tile in c's dtype, for its TMA stores
        c_bufs = gl.allocate_shared_memory(c_desc.dtype, [2, BLOCK_M // 2, BLOCK_N], c_desc.layout)
        c_lo = c_bufs.index(0)
        c_hi = c_bufs.index(1)
    else:
        c_lo = a_ring  # (unused)
        c_hi = a_ring
    gl.warp_specialize([
        (_ws_mma_partition, (a_ring, b_ring, ready, empty, a_scale_ptr, a_scale_off, b_scale_ptr, bias_ptr, c_ptr,
                             c_desc, c_lo, M, N, K, stride_cm, ROW_LO, HAS_BIAS, GROUP_M, WAIT_PRIOR, EPI_TMA)),
        (_ws_mma_partition, (a_ring, b_ring, ready, empty, a_scale_ptr, a_scale_off, b_scale_ptr, bias_ptr, c_ptr,
                             c_desc, c_hi, M, N, K, stride_cm, ROW_HI, HAS_BIAS, GROUP_M, WAIT_PRIOR, EPI_TMA)),
        (_ws_load_partition, (a_desc, b_desc, a_ring, b_ring, ready, empty, M, N, K, GROUP_M, WAIT_PRIOR)),
    ], [4, 1], [CONSUMER_REGS, 40])


_i8_gemm_fast = cached(_i8_gemm_kernel)
_i8_gemm_ws_fast = cached(_i8_gemm_ws_kernel)
_C_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}
_WS_CONSUMER_REGS = 232  # registers a thread of the second consumer warpgroup (setmaxnreg; the load warp 40)


def usable(a: torch.Tensor, stride_a: int, K: int, weight_q: torch.Tensor) -> bool:
    """Whether the kernel takes codes [M, K] at ``a`` (row stride ``stride_a``; ``a`` may be a flat
    workspace) and the weight [N, K]."""
    return (a.is_cuda and _is_sm90(a.device.index or 0) and K % 16 == 0 and stride_a % 16 == 0
            and a.data_ptr() % 16 == 0 and weight_q.is_contiguous() and weight_q.data_ptr() % 16 == 0)


def launch(a, stride_a, a_scale, a_scale_off, weight_q, weight_scale, bias, out, M, N, K, cfg: dict,
           pdl: bool = False, part: torch.Tensor | None = None, part_off: int = 0) -> int:
    """``out = (f32(a @ weight_q^T) · a_scale[a_scale_off + m]) · weight_scale[n] (+ bias)``; the
    float32 row scales live at element ``a_scale_off`` of ``a_scale`` (any dtype: read as float32
    from there). ``pdl``: launched as a programmatic dependent of the previous grid. With
    ``cfg["SPLIT_K"]`` > 1, the int32 partials [splits, M, N] go at byte ``part_off`` of the int8 tensor
    ``part`` instead (16-byte aligned, room for the requested split count), and ``out`` is not
    written: the caller sums them (``int8_dynamic._splitk_reduce_kernel``). Returns the split count used."""
    bm, bn, bk = int(cfg["BLOCK_M"]), int(cfg["BLOCK_N"]), int(cfg["BLOCK_K"])
    k_iters, splits = split_plan(K, bk, int(cfg.get("SPLIT_K", 1)))
    if splits > 1 and (part is None or part_off % 16 or part.numel() - part_off < splits * M * N * 4):
        raise ValueError(f"i8_gemm_sm90.launch: split-K {splits} needs an int8 workspace of "
                         f"{splits * M * N * 4} bytes at a 16-byte aligned offset")
    a_desc = TensorDescriptor(a, [M, K], [stride_a, 1], [bm, bk], _smem_layout(bm, bk, gl.int8))
    b_desc = TensorDescriptor(weight_q, [N, K], [K, 1], [bn, bk], _smem_layout(bn, bk, gl.int8))
    opts = dict(num_warps=int(cfg["num_warps"]), enable_fp_fusion=False)
    if pdl:
        opts["launch_pdl"] = True
    _i8_gemm_fast[(ceil_div(M, bm) * ceil_div(N, bn), splits)](
        a_desc, b_desc, a_scale, a_scale_off, weight_scale, bias if bias is not None else weight_scale, out,
        part if splits > 1 else a, part_off, M, N, K, out.stride(0), k_iters, HAS_BIAS=bias is not None,
        GROUP_M=int(cfg["GROUP_M"]), STAGES=int(cfg["num_stages"]), WAIT_PRIOR=pdl, SPLIT_K=splits, **opts)
    return splits


def launch_ws(a, stride_a, a_scale, a_scale_off, weight_q, weight_scale, bias, out, M, N, K, cfg: dict,
              pdl: bool = False) -> None:
    """As :func:`launch`, with the warp-specialized persistent kernel (module docstring). ``cfg["EPI"]
    == "tma"``: the output tiles leave by TMA stores that overlap the next tile's K loop, where the
    output's rows are 16-byte aligned (else the 16-byte row stores, as by default)."""
    bm, bn, bk = int(cfg["BLOCK_M"]), int(cfg["BLOCK_N"]), int(cfg["BLOCK_K"])
    a_desc = TensorDescriptor(a, [M, K], [stride_a, 1], [bm, bk], _smem_layout(bm, bk, gl.int8))
    b_desc = TensorDescriptor(weight_q, [N, K], [K, 1], [bn, bk], _smem_layout(bn, bk, gl.int8))
    elt = out.element_size()
    epi_tma = (cfg.get("EPI") == "tma" and out.stride(1) == 1 and (out.stride(0) * elt) % 16 == 0
               and out.data_ptr() % 16 == 0)
    if epi_tma:
        c_gl = _C_DTYPES[out.dtype]
        c_desc = TensorDescriptor(out, [M, N], [out.stride(0), 1], [bm // 2, bn], _smem_layout(bm // 2, bn, c_gl))
    else:
        c_desc = a_desc  # (not read)
    opts = dict(num_warps=4, enable_fp_fusion=False)
    if pdl:
        opts["launch_pdl"] = True
    # The ring's depth, within what one CTA may use beside the output tile (the epilogue's
    # layout-conversion scratch, or the TMA stores' buffers: each consumer's half tile in the output
    # dtype) and the barriers.
    stages = max(2, min(int(cfg["num_stages"]), (_SMEM_BYTES - bm * bn * elt - 1024) // ((bm + bn) * bk)))
    tiles = ceil_div(M, bm) * ceil_div(N, bn)
    _i8_gemm_ws_fast[(min(tiles, _num_sms(a.device.index or 0)),)](
        a_desc, b_desc, a_scale, a_scale_off, weight_scale, bias if bias is not None else weight_scale, out, c_desc,
        M, N, K, out.stride(0), HAS_BIAS=bias is not None, GROUP_M=int(cfg["GROUP_M"]),
        STAGES=stages, WAIT_PRIOR=pdl, CONSUMER_REGS=_WS_CONSUMER_REGS, EPI_TMA=epi_tma, **opts)
