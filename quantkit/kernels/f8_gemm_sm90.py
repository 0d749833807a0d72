"""fp8 block-scaled GEMM for fp8-block at large M on sm_90, written in Gluon:

    y[m, n] = Σ_kb (Σ_{k ∈ kb} xq[m, k] · wq[n, k]) · (x_scale[m, kb] · w_scale[n // b, kb])  (+ bias[n])

on activation codes and scales already written by ``fp8_block._launch_act_quant``.

Why. Each b-deep K block's product must be scaled before it joins the float32 sum (block scaling, the
reference's promotion), so a K loop waits for every block's wgmmas before its FMAs, and the tensor
cores idle while it scales. Triton's ``tl.dot`` + FMA loop does exactly that in one instruction stream
(the tiled kernel: ~0.7 of cuBLAS's block-scaled GEMM). Keeping the next block's wgmma in flight while
the last product is scaled does not help: ptxas serializes every wgmma once a plain instruction reads
an accumulator while another wgmma is in flight (warning C7514). So the work is split over warps
(``gl.warp_specialize``), as cuBLAS's and DeepGEMM's kernels split it:

* a load warp: per K block, the tile's x scales and its weight scale (repeated per row) by cp.async,
  and the x-code and weight tiles by TMA, into a ring of STAGES slots (one ``ready`` mbarrier each,
  which also waits for the scale copies; TMA zero-fills rows past M and N and columns past K);
* two consumer warpgroups, rows 0-63 and 64-127 of a 128 × BLOCK_N tile, each on its own: wait for a
  slot, issue the block's wgmmas into a fresh product, wait for them, release the slot (an ``empty``
  mbarrier counting both consumers), then scale the product into its float32 sum. While one scales,
  the other's wgmmas keep the tensor cores busy.

The grid is persistent (one program per SM, tiles in grouped order), so the load warp fills the ring
with the next tile's blocks while the consumers store the last one (``EPI="tma"``: each consumer hands
its tile to a TMA store from its own buffer and goes on to the next tile's blocks at once). The scales
go through shared memory because loads into the consumers' registers a block or two ahead still held
the next block's wgmmas back by their latency (ptxas copies a loop-carried load register in the
iteration that loads it): 15-30 % slower (notes/fp8_block.md, round 12).

Split-K (``SPLIT_K`` > 1): the persistent loop walks (tile, split) pairs, split s taking K blocks
[s·K_ITERS, (s + 1)·K_ITERS), and each pair's float32 sum goes unrounded, without bias, to the partials
[SPLIT_K, M, N], which ``fp8_block._splitk_sum_kernel`` adds in split order (+ bias) and rounds. Why: at
M ≤ 128 a 128-row tile is all of x, so 64-wide tiles give N / 64 programs, 64 on a 4096-wide layer: half
the SMs idle while each program's K loop (its consumers' wgmma waits and promotions, its x tiles from L2)
sets the time. Two splits put 128 programs on half as many blocks each.

Numerics: those of ``fp8_block._gemm_tiled_kernel`` bit for bit: the same fp8 wgmma chain per K block
(BLOCK_K = b), then ``fma(product, x_scale · w_scale, sum)``, K blocks in order, bias added to the
float32 sum, one rounding to y's dtype. With split-K each split's sum is that of the tiled kernel on its
K range (float32 output), and the splits are added in order: another order of float32 roundings.

Requirements (:func:`usable`): sm_90; codes with K a multiple of 16 and 16-byte-aligned rows; a
contiguous weight; 32 ≤ b ≤ 128 and BLOCK_N dividing b (one weight scale per tile and K block).
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from quantkit.kernels.launch import cached
from quantkit.kernels.tiling import grouped_pid, split_plan
from quantkit.kernels.i8_gemm_sm90 import _C_DTYPES, _store_rows, _store_tma
from quantkit.kernels.wo_gemm_sm90 import _SMEM_BYTES, _grid_wait, _is_sm90, _num_sms, _smem_layout
from quantkit.reference.common import ceil_div


@gluon.jit
def _work_item(w, M, N, num_k, K_ITERS, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr,
               SPLIT_K: gl.constexpr):
    """Work item w: (off_m, off_n, the split, its first K block, its K block count). The splits of a tile
    are consecutive items, so they run side by side."""
    split = w % SPLIT_K
    pid_m, pid_n = grouped_pid(w // SPLIT_K, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    k0 = split * K_ITERS
    return pid_m * BLOCK_M, pid_n * BLOCK_N, split, k0, gl.minimum(K_ITERS, num_k - k0)


@gluon.jit
def _load_partition(a_desc, b_desc, a_ring, b_ring, xs_ring, ws_ring, ready, empty, as_ptr, stride_asm, stride_ask,
                    bs_ptr, stride_bsn, stride_bsk, M, N, num_k, num_work, K_ITERS, GROUP_M: gl.constexpr,
                    STAGES: gl.constexpr, WAIT_PRIOR: gl.constexpr, SPLIT_K: gl.constexpr):
    """One warp: per K block of each of the program's work items, its scales by cp.async and its operand
    tiles by TMA into the next ring slot, once both consumers released that slot."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    row_layout: gl.constexpr = gl.BlockedLayout([BLOCK_M // 32], [32], [1], [0])
    if WAIT_PRIOR:
        _grid_wait()  # the activation codes and scales come from the grid before this one
    it = 0
    for w in range(gl.program_id(0), num_work, gl.num_programs(0)):
        off_m, off_n, split, k0, nk = _work_item(w, M, N, num_k, K_ITERS, BLOCK_M, BLOCK_N, GROUP_M, SPLIT_K)
        offs_m = off_m + gl.arange(0, BLOCK_M, layout=row_layout)
        m_ok = offs_m < M
        as_rows = as_ptr + offs_m * stride_asm + k0 * stride_ask
        bs_col = bs_ptr + (off_n // BLOCK_K) * stride_bsn + k0 * stride_bsk + offs_m * 0
        for k in range(nk):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)  # (a fresh barrier passes parity 1)
            # The scale copies' arrivals before the tiles': a phase must not complete on the tiles alone.
            async_copy.async_copy_global_to_shared(xs_ring.index(s), as_rows + k * stride_ask, mask=m_ok)
            async_copy.async_copy_global_to_shared(ws_ring.index(s), bs_col + k * stride_bsk, mask=m_ok)
            async_copy.mbarrier_arrive(ready.index(s))  # (with its own count: the phase waits for them)
            mbarrier.expect(ready.index(s), nbytes)
            tma.async_copy_global_to_shared(b_desc, [off_n, (k0 + k) * BLOCK_K], ready.index(s), b_ring.index(s))
            tma.async_copy_global_to_shared(a_desc, [off_m, (k0 + k) * BLOCK_K], ready.index(s), a_ring.index(s))
            it += 1


@gluon.jit
def _mma_partition(a_ring, b_ring, xs_ring, ws_ring, ready, empty, bias_ptr, c_ptr, c_desc, c_buf, part_ptr, M, N,
                   stride_cm, num_k, num_work, K_ITERS, ROW0: gl.constexpr, HAS_BIAS: gl.constexpr,
                   GROUP_M: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, EPI_TMA: gl.constexpr,
                   SPLIT_K: gl.constexpr):
    """One warpgroup: rows ROW0 .. ROW0 + 63 of each of the program's work items. Per K block: the block's
    wgmmas into a fresh product, wait for them, release the slot, fold the product into the float32
    sum with its scales; then the tile's epilogue while the load warp fills the ring for the next
    (``EPI_TMA``: stored by TMA from ``c_buf`` while the next tile's K loop runs; with split-K the float32
    sum as it is, to the partials of its split)."""
    ROWS: gl.constexpr = 64
    STAGES: gl.constexpr = a_ring.shape[0]
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BLOCK_N, 32])
    scale_layout: gl.constexpr = gl.SliceLayout(1, mma_layout)
    zero = gl.zeros([ROWS, BLOCK_N], gl.float32, mma_layout)
    p = zero
    it = 0
    for w in range(gl.program_id(0), num_work, gl.num_programs(0)):
        off_m, off_n, split, k0, nk = _work_item(w, M, N, num_k, K_ITERS, BLOCK_M, BLOCK_N, GROUP_M, SPLIT_K)
        acc = zero
        for k in range(nk):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            sc = xs_ring.index(s).slice(ROW0, ROWS).load(scale_layout) * \
                ws_ring.index(s).slice(ROW0, ROWS).load(scale_layout)
            p = warpgroup_mma(a_ring.index(s).slice(ROW0, ROWS), b_ring.index(s).permute((1, 0)), p, use_acc=False,
                              is_async=True)
            p = warpgroup_mma_wait(num_outstanding=0, deps=(p, ))
            gl.thread_barrier()  # every warp of the group is past this block
            mbarrier.arrive(empty.index(s), count=1)
            acc = gl.fma(p, sc[:, None], acc)
            it += 1

        if SPLIT_K > 1:  # the sum unrounded, in rows (the split-K reduction adds the bias and rounds)
            _store_rows(acc, part_ptr + split.to(gl.int64) * M * N, M, N, N, off_m + ROW0, off_n, 4)
        else:
            # Bias on the float32 sum, one rounding, 16-byte stores or a TMA store.
            if HAS_BIAS:
                offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))
                acc = acc + gl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(gl.float32)[None, :]
            if EPI_TMA:
                _store_tma(acc, c_desc, c_buf, off_m + ROW0, off_n)
            else:
                _store_rows(acc, c_ptr, M, N, stride_cm, off_m + ROW0, off_n, 4)
    if EPI_TMA:
        tma.store_wait(0)  # c_buf stays this program's until the copy engine has read it


@gluon.jit
def _f8_gemm_kernel(a_desc, b_desc, as_ptr, stride_asm, stride_ask, bs_ptr, stride_bsn, stride_bsk, bias_ptr, c_ptr,
                    c_desc, part_ptr, M, N, K, stride_cm, K_ITERS, HAS_BIAS: gl.constexpr, GROUP_M: gl.constexpr,
                    STAGES: gl.constexpr, WAIT_PRIOR: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                    EPI_TMA: gl.constexpr, SPLIT_K: gl.constexpr, num_warps: gl.constexpr):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    gl.static_assert(BLOCK_M == 128 and num_warps == 4, "two 64-row consumer warpgroups")
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
    scale_smem: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    xs_ring = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], scale_smem)
    ws_ring = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], scale_smem)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrival from each consumer warpgroup
    num_k = gl.cdiv(K, BLOCK_K)
    num_work = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N) * SPLIT_K  # (tile, split) pairs
    # Default partition (4 warps): rows 0-63; workers: rows 64-127 (4 warps) and the loads (1 warp).
    # The consumers run unsynchronized, so one's scaling FMAs can overlap the other's wgmmas.
    ROW_LO: gl.constexpr = 0
    ROW_HI: gl.constexpr = 64
    if EPI_TMA:  # each consumer warpgroup's 64 × BLOCK_N tile in c's dtype, for its TMA stores
        c_bufs = gl.allocate_shared_memory(c_desc.dtype, [2, 64, BLOCK_N], c_desc.layout)
        c_lo = c_bufs.index(0)
        c_hi = c_bufs.index(1)
    else:
        c_lo = a_ring  # (unused)
        c_hi = a_ring
    gl.warp_specialize([
        (_mma_partition, (a_ring, b_ring, xs_ring, ws_ring, ready, empty, bias_ptr, c_ptr, c_desc, c_lo, part_ptr, M,
                          N, stride_cm, num_k, num_work, K_ITERS, ROW_LO, HAS_BIAS, GROUP_M, BLOCK_M, BLOCK_N,
                          EPI_TMA, SPLIT_K)),
        (_mma_partition, (a_ring, b_ring, xs_ring, ws_ring, ready, empty, bias_ptr, c_ptr, c_desc, c_hi, part_ptr, M,
                          N, stride_cm, num_k, num_work, K_ITERS, ROW_HI, HAS_BIAS, GROUP_M, BLOCK_M, BLOCK_N,
                          EPI_TMA, SPLIT_K)),
        (_load_partition, (a_desc, b_desc, a_ring, b_ring, xs_ring, ws_ring, ready, empty, as_ptr, stride_asm,
                           stride_ask, bs_ptr, stride_bsn, stride_bsk, M, N, num_k, num_work, K_ITERS, GROUP_M,
                           STAGES, WAIT_PRIOR, SPLIT_K)),
    ], [4, 1], [CONSUMER_REGS, 40])


_f8_gemm_fast = cached(_f8_gemm_kernel)


CONSUMER_REGS = 232  # registers a thread of the second consumer warpgroup (setmaxnreg; the load warp 40)


def usable(x_q: torch.Tensor, weight_q: torch.Tensor, block_size: int, block_n: int) -> bool:
    """Whether the kernel takes codes ``x_q`` [M, K] and the weight [N, K] with this block size."""
    K = x_q.shape[1]
    return (x_q.is_cuda and _is_sm90(x_q.device.index or 0) and K % 16 == 0 and x_q.stride(1) == 1
            and x_q.stride(0) % 16 == 0 and x_q.data_ptr() % 16 == 0 and weight_q.is_contiguous()
            and weight_q.data_ptr() % 16 == 0 and 32 <= block_size <= 128 and 32 <= block_n and block_size % block_n == 0)


def launch(x_q, x_scale, stride_xsm, stride_xsk, weight_q, weight_scale, bias, out, block_size: int, cfg: dict,
           pdl: bool = False, partials: torch.Tensor | None = None) -> None:
    """``out`` = the block-scaled product (module docstring) for codes ``x_q`` [M, K] and float32 scales
    at ``x_scale[m * stride_xsm + kb * stride_xsk]``. ``pdl``: launched as a programmatic dependent of
    the quantization grid just launched. ``partials``: with ``cfg["SPLIT_K"]`` > 1, the float32
    [splits, M, N] (contiguous; ``tiling.split_plan``'s count) that get each split's sums instead of ``out``,
    which is then not written (the caller adds them: ``fp8_block._splitk_sum_kernel``)."""
    M, K = x_q.shape
    N = weight_q.shape[0]
    bm, bn = int(cfg["BLOCK_M"]), int(cfg["BLOCK_N"])
    k_iters, splits = split_plan(K, block_size, int(cfg.get("SPLIT_K", 1)))
    if splits > 1 and (partials is None or partials.dtype != torch.float32 or not partials.is_contiguous()
                       or tuple(partials.shape) != (splits, M, N)):
        raise ValueError(f"f8_gemm_sm90.launch: split-K {splits} needs contiguous float32 partials of shape "
                         f"{(splits, M, N)}, got "
                         f"{None if partials is None else (partials.dtype, tuple(partials.shape))}")
    fp8 = gl.float8e4nv
    a_desc = TensorDescriptor(x_q, [M, K], [x_q.stride(0), 1], [bm, block_size], _smem_layout(bm, block_size, fp8))
    b_desc = TensorDescriptor(weight_q, [N, K], [K, 1], [bn, block_size], _smem_layout(bn, block_size, fp8))
    elt = 4 if splits > 1 else out.element_size()
    epi_tma = (splits == 1 and cfg.get("EPI") == "tma" and out.stride(1) == 1 and (out.stride(0) * elt) % 16 == 0
               and out.data_ptr() % 16 == 0)
    if epi_tma:
        c_layout = _smem_layout(64, bn, _C_DTYPES[out.dtype])
        c_desc = TensorDescriptor(out, [M, N], [out.stride(0), 1], [64, bn], c_layout)
    else:
        c_desc = a_desc  # (not read)
    # The ring's depth, within what one CTA may use beside the output tile (the epilogue's
    # layout-conversion scratch, or the TMA stores' buffers: each consumer's 64 × BLOCK_N tile in the
    # output dtype) and the barriers.
    stage_bytes = (bm + bn) * block_size + 2 * 4 * bm  # the operand tiles and the two scale rows
    stages = max(2, min(int(cfg["num_stages"]), (_SMEM_BYTES - 2 * 64 * bn * elt - 1024) // stage_bytes))
    opts = dict(num_warps=4)
    if pdl:
        opts["launch_pdl"] = True
    work = ceil_div(M, bm) * ceil_div(N, bn) * splits
    _f8_gemm_fast[(min(work, _num_sms(x_q.device.index or 0)),)](
        a_desc, b_desc, x_scale, stride_xsm, stride_xsk, weight_scale, weight_scale.stride(0), weight_scale.stride(1),
        bias if bias is not None else weight_scale, out, c_desc, partials if splits > 1 else weight_scale, M, N, K,
        out.stride(0), k_iters, HAS_BIAS=bias is not None and splits == 1, GROUP_M=int(cfg["GROUP_M"]), STAGES=stages,
        WAIT_PRIOR=pdl, CONSUMER_REGS=CONSUMER_REGS, EPI_TMA=epi_tma, SPLIT_K=splits, **opts)
