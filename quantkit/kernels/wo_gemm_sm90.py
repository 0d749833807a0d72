"""Weight-only GEMM for large M on sm_90, written in Gluon: y = (x @ Wq^T) * w_scale[n] (+ bias).

Why Gluon. A weight-only GEMM must turn every int8 weight tile into the 16-bit operand wgmma reads
from shared memory. In Triton's ``tl`` the conversion, the store of the converted tile and the wgmma
that reads it share one buffer, so Triton waits for each step's wgmma before the next conversion
(notes/int8_weight_only.md: ~0.65x bf16 at M >= 1024). Gluon lets the kernel say what it means:

* x tiles [BLOCK_M, BLOCK_K] (bf16/fp16) and int8 weight tiles [BLOCK_N, BLOCK_K] arrive by TMA into
  a ring of STAGES buffers, one mbarrier each;
* each step loads the int8 tile from shared memory with 16-byte loads, converts it (exactly:
  |q| <= 128 fits any 16-bit float) and stores it into one of three 16-bit operand buffers, then
  issues an *asynchronous* wgmma on it and waits only for the previous step's wgmma
  (``num_outstanding=1``): the conversion of step k + 1 runs while the tensor cores work on step k.

Why three operand buffers, and a refill of the slot two steps back: a step is [convert + store,
barrier, issue wgmma, wait for the previous wgmma]. Each warpgroup waits for its own wgmmas, so
before step k's barrier the other warpgroup may still run the wgmmas of steps k - 1 and k - 2; only
the wgmma of step k - 3 is retired everywhere (its wait precedes step k - 1's barrier). The operand
buffer a step writes before its barrier is therefore the one step k - 3 read (three buffers). After
step k's barrier, the wgmma of step k - 2 is retired everywhere, so its ring slot is refilled there,
with tile k + STAGES - 2: STAGES - 2 tiles are in flight ahead of the one being converted.

The warp-specialized variant (``_wo_int8_ws_kernel``, config ``WS``) gives each job its own warps and
replaces the CTA barriers with mbarrier hand-offs: one warp issues the TMA loads as soon as a ring
slot is released, four warps convert int8 tiles into a two-deep bf16 operand ring, and the default
warps (two warpgroups) only wait, issue wgmmas and release what the retired wgmma read. A slot is free
as soon as its tile is consumed, so all STAGES tiles can be in flight.

Numerics are those of ``int8_weight_only_linear``: float32 accumulation in the tensor cores, the
per-channel scale and the bias applied once to the float32 sum, one rounding to x.dtype.

Requirements (the caller checks, :func:`usable`): sm_90, x bf16/fp16 with unit stride along K and a
16-byte-aligned row stride, K a multiple of 16 (TMA's 16-byte rows for the int8 weight), 16-byte
aligned base addresses. Edges in M, N and K are zero-filled by TMA; the output store is masked.
"""
from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from quantkit.kernels.launch import cached
from quantkit.kernels.plan import note_unplannable
from quantkit.kernels.tiling import grouped_pid
from quantkit.reference.common import ceil_div


@gluon.jit
def _tile_origin(M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    """(row, column) of this program's output tile, in grouped launch order (L2 reuse)."""
    pid_m, pid_n = grouped_pid(gl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@gluon.jit
def _store_tile(acc, scale_ptr, bias_ptr, y_ptr, M, N, stride_ym, off_m, off_n, HAS_BIAS: gl.constexpr,
                BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, mma_layout: gl.constexpr):
    """y tile = acc · scale[n] (+ bias[n]), one rounding to y's dtype, masked to [M, N]."""
    offs_m = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma_layout))
    offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))
    n_ok = offs_n < N
    y = acc * gl.load(scale_ptr + offs_n, mask=n_ok, other=0.0).to(gl.float32)[None, :]
    if HAS_BIAS:
        y = y + gl.load(bias_ptr + offs_n, mask=n_ok, other=0.0).to(gl.float32)[None, :]
    ptrs = y_ptr + offs_m.to(gl.int64)[:, None] * stride_ym + offs_n[None, :]
    gl.store(ptrs, y.to(y_ptr.dtype.element_ty), mask=(offs_m < M)[:, None] & n_ok[None, :])


@gluon.jit
def _step(k, num_k, acc, use_acc, x_desc, w_desc, x_ring, w_ring, b_bufs, ready, off_m, off_n,
          cvt_layout: gl.constexpr, tile_bytes: gl.constexpr, STAGES: gl.constexpr, AHEAD: gl.constexpr,
          BUFS: gl.constexpr):
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    s = k % STAGES
    mbarrier.wait(ready.index(s), (k // STAGES) & 1)
    b = b_bufs.index(k % BUFS)
    b.store(w_ring.index(s).load(cvt_layout).to(x_desc.dtype))  # exact: |q| <= 128
    fence_async_shared()  # the generic-proxy stores before the async-proxy reads of the wgmma
    gl.thread_barrier()   # every warp's part of the operand before either warpgroup's wgmma
    acc = warpgroup_mma(x_ring.index(s), b.permute((1, 0)), acc, use_acc=use_acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
    # Every warpgroup retired the wgmma of step k - 2 before this step's barrier (its wait came
    # before): that ring slot takes tile k + AHEAD. (Issuing the copies before the wgmma instead
    # measured the same or slower on the H100.)
    nk = k + AHEAD
    ns = nk % STAGES
    pred = nk < num_k
    mbarrier.expect(ready.index(ns), tile_bytes, pred=pred)
    tma.async_copy_global_to_shared(x_desc, [off_m, nk * BLOCK_K], ready.index(ns), x_ring.index(ns), pred=pred)
    tma.async_copy_global_to_shared(w_desc, [off_n, nk * BLOCK_K], ready.index(ns), w_ring.index(ns), pred=pred)
    return acc


@gluon.jit
def _wo_int8_kernel(x_desc, w_desc, scale_ptr, bias_ptr, y_ptr, M, N, K, stride_ym,
                    HAS_BIAS: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                    INSTR_N: gl.constexpr, num_warps: gl.constexpr):
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    dtype: gl.constexpr = x_desc.dtype
    BUFS: gl.constexpr = 3

    off_m, off_n = _tile_origin(M, N, BLOCK_M, BLOCK_N, GROUP_M)

    x_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], x_desc.layout)
    w_ring = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_N, BLOCK_K], w_desc.layout)
    b_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_K], dtype)
    b_bufs = gl.allocate_shared_memory(dtype, [BUFS, BLOCK_N, BLOCK_K], b_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)

    num_k = gl.cdiv(K, BLOCK_K)
    tile_bytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes
    AHEAD: gl.constexpr = STAGES - 2  # tiles in flight ahead of the one being converted
    for i in gl.static_range(AHEAD):
        pred = i < num_k
        mbarrier.expect(ready.index(i), tile_bytes, pred=pred)
        tma.async_copy_global_to_shared(x_desc, [off_m, i * BLOCK_K], ready.index(i), x_ring.index(i), pred=pred)
        tma.async_copy_global_to_shared(w_desc, [off_n, i * BLOCK_K], ready.index(i), w_ring.index(i), pred=pred)

    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, INSTR_N, 16])
    # 16 int8 per thread along K: one 16-byte shared-memory load each.
    TPW_K: gl.constexpr = BLOCK_K // 16
    cvt_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 16], threads_per_warp=[32 // TPW_K, TPW_K],
                                                warps_per_cta=[num_warps, 1], order=[1, 0])
    acc = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, mma_layout)
    # Step 0 outside the loop, with use_acc=False: the accumulator that enters the loop is then
    # defined by a wgmma, never by the zero-fill (ptxas serializes every wgmma otherwise, C7515).
    acc = _step(0, num_k, acc, False, x_desc, w_desc, x_ring, w_ring, b_bufs, ready, off_m, off_n, cvt_layout,
                tile_bytes, STAGES, AHEAD, BUFS)
    for k in range(1, num_k):
        acc = _step(k, num_k, acc, True, x_desc, w_desc, x_ring, w_ring, b_bufs, ready, off_m, off_n, cvt_layout,
                    tile_bytes, STAGES, AHEAD, BUFS)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))

    _store_tile(acc, scale_ptr, bias_ptr, y_ptr, M, N, stride_ym, off_m, off_n, HAS_BIAS, BLOCK_M, BLOCK_N,
                mma_layout)


@gluon.jit
def _load_partition(x_desc, w_desc, x_ring, w_ring, ready, x_empty, w_empty, off_m, off_n, num_k,
                    STAGES: gl.constexpr):
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    tile_bytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes
    for k in range(num_k):
        s = k % STAGES
        free_phase = ((k // STAGES) & 1) ^ 1  # a fresh barrier passes a wait on parity 1
        mbarrier.wait(x_empty.index(s), free_phase)
        mbarrier.wait(w_empty.index(s), free_phase)
        mbarrier.expect(ready.index(s), tile_bytes)
        tma.async_copy_global_to_shared(x_desc, [off_m, k * BLOCK_K], ready.index(s), x_ring.index(s))
        tma.async_copy_global_to_shared(w_desc, [off_n, k * BLOCK_K], ready.index(s), w_ring.index(s))


@gluon.jit
def _convert_partition(w_ring, b_ring, ready, w_empty, b_ready, b_empty, num_k, STAGES: gl.constexpr,
                       BUFS: gl.constexpr, dtype: gl.constexpr, cvt_layout: gl.constexpr):
    for k in range(num_k):
        s = k % STAGES
        mbarrier.wait(ready.index(s), (k // STAGES) & 1)
        q = w_ring.index(s).load(cvt_layout)
        gl.thread_barrier()
        mbarrier.arrive(w_empty.index(s), count=1)
        j = k % BUFS
        mbarrier.wait(b_empty.index(j), ((k // BUFS) & 1) ^ 1)
        b_ring.index(j).store(q.to(dtype))
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(b_ready.index(j), count=1)


@gluon.jit
def _mma_partition(x_ring, b_ring, ready, b_ready, x_empty, b_empty, scale_ptr, bias_ptr, y_ptr, M, N, stride_ym,
                   off_m, off_n, num_k, HAS_BIAS: gl.constexpr, STAGES: gl.constexpr, BUFS: gl.constexpr,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, mma_layout: gl.constexpr):
    acc = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, mma_layout)
    mbarrier.wait(ready.index(0), 0)
    mbarrier.wait(b_ready.index(0), 0)
    acc = warpgroup_mma(x_ring.index(0), b_ring.index(0).permute((1, 0)), acc, use_acc=False, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
    for k in range(1, num_k):
        s = k % STAGES
        j = k % BUFS
        mbarrier.wait(ready.index(s), (k // STAGES) & 1)
        mbarrier.wait(b_ready.index(j), (k // BUFS) & 1)
        acc = warpgroup_mma(x_ring.index(s), b_ring.index(j).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        gl.thread_barrier()  # both warpgroups retired step k - 1
        mbarrier.arrive(x_empty.index((k - 1) % STAGES), count=1)
        mbarrier.arrive(b_empty.index((k - 1) % BUFS), count=1)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))

    _store_tile(acc, scale_ptr, bias_ptr, y_ptr, M, N, stride_ym, off_m, off_n, HAS_BIAS, BLOCK_M, BLOCK_N,
                mma_layout)


@gluon.jit
def _wo_int8_ws_kernel(x_desc, w_desc, scale_ptr, bias_ptr, y_ptr, M, N, K, stride_ym,
                    HAS_BIAS: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                    INSTR_N: gl.constexpr, num_warps: gl.constexpr):
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    dtype: gl.constexpr = x_desc.dtype
    BUFS: gl.constexpr = 2  # the converter and the MMA warps hand buffers over through mbarriers
    CVT_WARPS: gl.constexpr = 4

    off_m, off_n = _tile_origin(M, N, BLOCK_M, BLOCK_N, GROUP_M)

    x_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], x_desc.layout)
    w_ring = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_N, BLOCK_K], w_desc.layout)
    b_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_K], dtype)
    b_ring = gl.allocate_shared_memory(dtype, [BUFS, BLOCK_N, BLOCK_K], b_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    x_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    w_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    b_ready = gl.allocate_shared_memory(gl.int64, [BUFS, 1], mbarrier.MBarrierLayout())
    b_empty = gl.allocate_shared_memory(gl.int64, [BUFS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(x_empty.index(i), count=1)
        mbarrier.init(w_empty.index(i), count=1)
    for i in gl.static_range(BUFS):
        mbarrier.init(b_ready.index(i), count=1)
        mbarrier.init(b_empty.index(i), count=1)

    num_k = gl.cdiv(K, BLOCK_K)
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, INSTR_N, 16])
    TPW_K: gl.constexpr = BLOCK_K // 16
    cvt_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 16], threads_per_warp=[32 // TPW_K, TPW_K],
                                                warps_per_cta=[CVT_WARPS, 1], order=[1, 0])
    # Default partition (num_warps warps, two warpgroups): the wgmmas and the epilogue. Workers: one
    # warp issuing the TMA loads, four warps converting int8 tiles into the bf16 operand ring.
    gl.warp_specialize([
        (_mma_partition, (x_ring, b_ring, ready, b_ready, x_empty, b_empty, scale_ptr, bias_ptr, y_ptr, M, N,
                          stride_ym, off_m, off_n, num_k, HAS_BIAS, STAGES, BUFS, BLOCK_M, BLOCK_N, mma_layout)),
        (_load_partition, (x_desc, w_desc, x_ring, w_ring, ready, x_empty, w_empty, off_m, off_n, num_k, STAGES)),
        (_convert_partition, (w_ring, b_ring, ready, w_empty, b_ready, b_empty, num_k, STAGES, BUFS, dtype,
                              cvt_layout)),
    ], [1, CVT_WARPS], [24, 80])


_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}
_wo_int8_fast = cached(_wo_int8_kernel)
_wo_int8_ws_fast = cached(_wo_int8_ws_kernel)


@functools.lru_cache(maxsize=None)
def _is_sm90(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] == 9


def usable(x: torch.Tensor, weight_q: torch.Tensor) -> bool:
    """Whether this kernel can take the problem (see the module docstring's requirements)."""
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


def launch(x, weight_q, weight_scale, bias, out, cfg: dict) -> None:
    """One launch of the kernel for ``out = x @ weight_q^T * weight_scale (+ bias)``, through
    :func:`quantkit.kernels.launch.cached` (Triton's own launch path costs this kernel 100-500 µs of
    host time, more than its GPU time at M = 1024). Host TMA descriptors are built per call, so the
    call is not replayed by launch plans (they would keep the recorded addresses)."""
    M, K = x.shape
    N = weight_q.shape[0]
    bm, bn, bk = int(cfg["BLOCK_M"]), int(cfg["BLOCK_N"]), int(cfg["BLOCK_K"])
    x_desc, w_desc = descriptors(x, weight_q, bm, bn, bk)
    note_unplannable("a Gluon launch with host TMA descriptors")
    grid = (ceil_div(M, bm) * ceil_div(N, bn),)
    fast = _wo_int8_ws_fast if cfg.get("WS") else _wo_int8_fast
    fast[grid](x_desc, w_desc, weight_scale, bias if bias is not None else weight_scale, out, M, N, K,
               out.stride(0), HAS_BIAS=bias is not None, GROUP_M=int(cfg.get("GROUP_M", 8)),
               STAGES=int(cfg["num_stages"]), INSTR_N=min(bn, 256), num_warps=int(cfg["num_warps"]))

