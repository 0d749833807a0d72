"""fp8 block-scaled "swap" GEMM for 17 ≤ M ≤ 256 on sm_90, written in Gluon: yᵀ tiles [BLOCK_W weight rows,
BLOCK_X x rows] = Σ_kb (W_kb · Xq_kbᵀ) · (x_scale[kb, m] · w_scale[n / b, kb]), the activation already
quantized (``fp8_block._launch_act_quant``).

Why Gluon. Each b-deep K block's product must be scaled before it joins the sum (block scaling), so
Triton's ``tl.dot`` + FMA loop waits for every wgmma to finish (``wgmma.wait_group 0``) before the FMA.
The tensor cores then drain after each K block, and at M = 128 the layer is a chain of such waits
(notes/fp8_block.md, round 11). Here two result registers alternate:
* K block j's wgmma is issued into one of them (``use_acc=False``: a fresh product);
* then the kernel waits only for block j - 1's wgmma into the other, and folds it into the float32 sum
  with its scales while block j runs.

The loop is unrolled by two so that the two products are distinct registers. A wgmma's destination is
never copied while it is in flight.

Operands arrive by TMA in a ring of STAGES slots (one mbarrier each). TMA zero-fills past M, N and K.
A K block's slot is refilled once its wgmma has been waited for.

Numerics: those of the Triton swap kernel, bit for bit: each block's float32 product is multiplied by the
float32 product x_scale · w_scale and added with one FMA, blocks in K order. Bias (unsplit) once at
the end. ``SPLIT_K`` > 1 splits the K blocks evenly over grid axis 1. The splits store float32 partials
[split, M, N], which ``fp8_block._splitk_sum_kernel`` adds.

Requirements (:func:`usable`): sm_90; fp8 codes with K a multiple of 16 and 16-byte-aligned rows; a
contiguous weight; a block size of 32–256 that BLOCK_W divides, so that one weight-scale row serves a
program.
"""
from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from quantkit.kernels.launch import cached
from quantkit.reference.common import ceil_div


@gluon.jit
def _grid_wait():
    """Programmatic dependent launch: wait for the previous grid (the activation quantization)."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _launch_dependents():
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, is_pure=False,
                              pack=1)


@gluon.jit
def _issue(i, kb0, w_desc, x_desc, w_ring, x_ring, ready, off_w, off_x, STAGES: gl.constexpr):
    """TMA loads of this program's K block i (global block kb0 + i) into slot i % STAGES."""
    BLOCK_K: gl.constexpr = w_desc.block_type.shape[1]
    nbytes: gl.constexpr = w_desc.block_type.nbytes + x_desc.block_type.nbytes
    s = i % STAGES
    k = (kb0 + i) * BLOCK_K
    mbarrier.expect(ready.index(s), nbytes)
    tma.async_copy_global_to_shared(w_desc, [off_w, k], ready.index(s), w_ring.index(s))
    tma.async_copy_global_to_shared(x_desc, [off_x, k], ready.index(s), x_ring.index(s))


@gluon.jit
def _scales(i, nkb, kb0, ws_row, xs_ptr, offs_x, x_ok, stride_xsk, stride_wsk):
    """x_scale[kb, m] · w_scale[n / b, kb] for this program's K block i (0 past its last block: the
    zero-filled or foreign block it then loads adds nothing)."""
    kb = kb0 + i
    live = i < nkb
    xs = gl.load(xs_ptr + kb * stride_xsk + offs_x, mask=x_ok & live, other=0.0)
    ws = gl.load(ws_row + kb * stride_wsk, mask=live, other=0.0)
    return xs * ws


@gluon.jit
def _f8_swap_kernel(w_desc, x_desc, ws_ptr, xs_ptr, bias_ptr, y_ptr, M, N, K, stride_xsm, stride_xsk, stride_wsn,
                    stride_wsk, stride_ym, HAS_BIAS: gl.constexpr, SPLIT_K: gl.constexpr, STAGES: gl.constexpr,
                    WAIT_PRIOR: gl.constexpr, LAUNCH_DEPENDENTS: gl.constexpr, num_warps: gl.constexpr):
    BLOCK_W: gl.constexpr = w_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = w_desc.block_type.shape[1]
    BLOCK_X: gl.constexpr = x_desc.block_type.shape[0]
    if WAIT_PRIOR:
        _grid_wait()
    num_x = gl.cdiv(M, BLOCK_X)
    pid_x = gl.program_id(0) % num_x
    pid_w = gl.program_id(0) // num_x
    off_w = pid_w * BLOCK_W
    off_x = pid_x * BLOCK_X
    num_kb = gl.cdiv(K, BLOCK_K)
    if SPLIT_K == 1:
        kb0 = 0
        nkb = num_kb
    else:
        per = gl.cdiv(num_kb, SPLIT_K)
        kb0 = gl.program_id(1) * per
        nkb = gl.minimum(num_kb - kb0, per)
    pairs = gl.cdiv(nkb, 2)  # an odd count runs one block more, its scale 0

    w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BLOCK_W, BLOCK_K], w_desc.layout)
    x_ring = gl.allocate_shared_memory(x_desc.dtype, [STAGES, BLOCK_X, BLOCK_K], x_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    for i in gl.static_range(STAGES - 1):
        if i < 2 * pairs:
            _issue(i, kb0, w_desc, x_desc, w_ring, x_ring, ready, off_w, off_x, STAGES)

    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BLOCK_X, 32])
    offs_x = off_x + gl.arange(0, BLOCK_X, layout=gl.SliceLayout(0, mma_layout))
    x_ok = offs_x < M
    xs_ptr = xs_ptr + offs_x * stride_xsm
    ws_row = ws_ptr + (off_w // BLOCK_K) * stride_wsn

    # Blocks 0 and 1 outside the loop define both products by a wgmma (an accumulator register last
    # written by anything else makes ptxas serialize the wgmmas, warning C7515).
    s_a = _scales(0, nkb, kb0, ws_row, xs_ptr, offs_x, x_ok, stride_xsk, stride_wsk)
    s_b = _scales(1, nkb, kb0, ws_row, xs_ptr, offs_x, x_ok, stride_xsk, stride_wsk)
    zero = gl.zeros([BLOCK_W, BLOCK_X], gl.float32, mma_layout)
    mbarrier.wait(ready.index(0), 0)
    p_a = warpgroup_mma(w_ring.index(0), x_ring.index(0).permute((1, 0)), zero, use_acc=False, is_async=True)
    p_a = warpgroup_mma_wait(num_outstanding=1, deps=(p_a, ))
    if STAGES - 1 < 2 * pairs:
        _issue(STAGES - 1, kb0, w_desc, x_desc, w_ring, x_ring, ready, off_w, off_x, STAGES)
    mbarrier.wait(ready.index(1 % STAGES), (1 // STAGES) & 1)
    p_b = warpgroup_mma(w_ring.index(1 % STAGES), x_ring.index(1 % STAGES).permute((1, 0)), zero, use_acc=False,
                        is_async=True)
    p_a = warpgroup_mma_wait(num_outstanding=1, deps=(p_a, ))
    acc = gl.fma(p_a, s_a[None, :], zero)
    gl.thread_barrier()  # block 0's slot is free in every warp
    if STAGES < 2 * pairs:
        _issue(STAGES, kb0, w_desc, x_desc, w_ring, x_ring, ready, off_w, off_x, STAGES)
    p_b = warpgroup_mma_wait(num_outstanding=1, deps=(p_b, ))  # (block 1 stays in flight)
    for j in range(1, pairs):
        a = 2 * j
        b = a + 1
        s_prev = s_b
        s_a = _scales(a, nkb, kb0, ws_row, xs_ptr, offs_x, x_ok, stride_xsk, stride_wsk)
        s_b = _scales(b, nkb, kb0, ws_row, xs_ptr, offs_x, x_ok, stride_xsk, stride_wsk)
        sa = a % STAGES
        mbarrier.wait(ready.index(sa), (a // STAGES) & 1)
        p_a = warpgroup_mma(w_ring.index(sa), x_ring.index(sa).permute((1, 0)), p_a, use_acc=False, is_async=True)
        p_b = warpgroup_mma_wait(num_outstanding=1, deps=(p_b, ))  # block a - 1 is done
        acc = gl.fma(p_b, s_prev[None, :], acc)
        gl.thread_barrier()
        if a + STAGES - 1 < 2 * pairs:
            _issue(a + STAGES - 1, kb0, w_desc, x_desc, w_ring, x_ring, ready, off_w, off_x, STAGES)
        sb = b % STAGES
        mbarrier.wait(ready.index(sb), (b // STAGES) & 1)
        p_b = warpgroup_mma(w_ring.index(sb), x_ring.index(sb).permute((1, 0)), p_b, use_acc=False, is_async=True)
        p_a = warpgroup_mma_wait(num_outstanding=1, deps=(p_a, ))  # block a is done
        p_b = warpgroup_mma_wait(num_outstanding=1, deps=(p_b, ))  # (block b stays in flight)
        acc = gl.fma(p_a, s_a[None, :], acc)
        gl.thread_barrier()
        if b + STAGES - 1 < 2 * pairs:
            _issue(b + STAGES - 1, kb0, w_desc, x_desc, w_ring, x_ring, ready, off_w, off_x, STAGES)
    p_b = warpgroup_mma_wait(num_outstanding=0, deps=(p_b, ))
    acc = gl.fma(p_b, s_b[None, :], acc)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
    if LAUNCH_DEPENDENTS:
        _launch_dependents()

    # yᵀ tile -> y rows (x rows) with the weight rows contiguous: through shared memory into 16-byte stores
    out_dtype: gl.constexpr = y_ptr.dtype.element_ty
    offs_w = off_w + gl.arange(0, BLOCK_W, layout=gl.SliceLayout(1, mma_layout))
    if HAS_BIAS:
        acc = acc + gl.load(bias_ptr + offs_w, mask=offs_w < N, other=0.0).to(gl.float32)[:, None]
    VEC: gl.constexpr = 128 // out_dtype.primitive_bitwidth
    TPW_W: gl.constexpr = min(32, BLOCK_W // VEC)
    store_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, VEC], threads_per_warp=[32 // TPW_W, TPW_W],
                                                  warps_per_cta=[num_warps, 1], order=[1, 0])
    y = gl.convert_layout(gl.permute(acc.to(out_dtype), (1, 0)), store_layout)  # [BLOCK_X, BLOCK_W]
    rows = off_x + gl.arange(0, BLOCK_X, layout=gl.SliceLayout(1, store_layout))
    cols = off_w + gl.arange(0, BLOCK_W, layout=gl.SliceLayout(0, store_layout))
    if SPLIT_K > 1:
        y_ptr += gl.program_id(1).to(gl.int64) * M * N
    ptrs = y_ptr + rows.to(gl.int64)[:, None] * stride_ym + cols[None, :]
    gl.store(ptrs, y, mask=(rows < M)[:, None] & (cols < N)[None, :])


_f8_swap_fast = cached(_f8_swap_kernel)


@functools.lru_cache(maxsize=None)
def _is_sm90(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] == 9


@functools.lru_cache(maxsize=None)
def _smem_layout(rows: int, cols: int, dtype):
    return gl.NVMMASharedLayout.get_default_for([rows, cols], dtype)


def usable(x_q: torch.Tensor, weight_q: torch.Tensor, block_size: int, block_w: int) -> bool:
    """Whether the kernel takes codes ``x_q`` [M, K] and the weight [N, K] with this block size."""
    K = x_q.shape[1]
    return (x_q.is_cuda and _is_sm90(x_q.device.index or 0) and K % 16 == 0 and x_q.stride(1) == 1
            and x_q.stride(0) % 16 == 0 and x_q.data_ptr() % 16 == 0 and weight_q.is_contiguous()
            and weight_q.data_ptr() % 16 == 0 and 32 <= block_size <= 256 and block_size % block_w == 0)


def launch(x_q, x_scale, stride_xsm, stride_xsk, weight_q, weight_scale, bias, out, block_size: int, block_w: int,
           block_x: int, stages: int, split: int, pdl: bool, num_warps: int = 4) -> None:
    """``out`` = the block-scaled product (module docstring); ``split`` > 1: ``out`` is the float32
    [split, M, N] workspace of partials, without bias. ``pdl``: launched as a programmatic dependent of
    the quantization, and (split > 1) letting the sum kernel launch early."""
    M, K = x_q.shape
    N = weight_q.shape[0]
    gl_fp8 = gl.float8e4nv
    w_desc = TensorDescriptor(weight_q, [N, K], [weight_q.stride(0), 1], [block_w, block_size],
                              _smem_layout(block_w, block_size, gl_fp8))
    x_desc = TensorDescriptor(x_q, [M, K], [x_q.stride(0), 1], [block_x, block_size],
                              _smem_layout(block_x, block_size, gl_fp8))
    opts = dict(num_warps=num_warps)
    if pdl:
        opts["launch_pdl"] = True
    tiles = ceil_div(N, block_w) * ceil_div(M, block_x)
    _f8_swap_fast[(tiles, split) if split > 1 else (tiles,)](
        w_desc, x_desc, weight_scale, x_scale, bias if bias is not None else weight_scale, out, M, N, K,
        stride_xsm, stride_xsk, weight_scale.stride(0), weight_scale.stride(1), N if split > 1 else out.stride(0),
        HAS_BIAS=bias is not None and split == 1, SPLIT_K=split, STAGES=stages, WAIT_PRIOR=pdl,
        LAUNCH_DEPENDENTS=pdl and split > 1, **opts)
