"""Scratch memory a kernel needs beyond its output, without a second allocation per call.

The families promise one allocation per call, the output's. Where a kernel needs scratch (the x codes
and scales of the two-kernel paths, the stream-K pieces of the weight-only GEMM, split-K partial sums)
it is carved from the same block: :func:`out_with_workspace`. Launch plans replay the block's
allocation and the views. The price: the scratch stays allocated as long as the output does (split-K
partials: a few MB on the shipped configs; the 8-bit paths' x codes: M·K bytes, half of a bf16 x). int4's
``dequant_mm``, whose scratch is the whole [N, K] weight, allocates it separately instead.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents

from quantkit.kernels.launch import cached
from quantkit.reference.common import ceil_div


def out_with_workspace(M: int, N: int, dtype: torch.dtype, device, ws_bytes: int):
    """(out [M, N] of ``dtype``, workspace of ``ws_bytes`` uint8, 16-byte aligned) from one allocation:
    the output is its leading part, so the call allocates nothing but the output's block (which the
    returned tensor keeps alive)."""
    size = dtype.itemsize
    out_bytes = ceil_div(M * N * size, 16) * 16
    # The block's size a multiple of 16 bytes: it can be viewed as any dtype of up to 16 bytes whole
    # (a launch plan rebuilds the workspace's views through such a view, one op each).
    buf = torch.empty(ceil_div(out_bytes + ws_bytes, 16) * 16 // size, dtype=dtype, device=device)
    return buf[:M * N].view(M, N), buf.view(torch.uint8)[out_bytes:out_bytes + ws_bytes]


@triton.jit
def _zero_i32_kernel(ptr, n, BLOCK: tl.constexpr, LAUNCH_DEPENDENTS: tl.constexpr):
    if LAUNCH_DEPENDENTS:
        gdc_launch_dependents()
    offs = tl.arange(0, BLOCK)
    tl.store(ptr + offs, tl.zeros([BLOCK], tl.int32), mask=offs < n)


_zero_i32 = cached(_zero_i32_kernel)


def zero_int32(t: torch.Tensor, launch_dependents: bool = False) -> None:
    """Zero a small int32 vector (counters) with one single-program launch through the launch cache
    (a launch plan replays it; ``Tensor.zero_`` would make the call unplannable). ``launch_dependents``
    (sm_90): a kernel launched next as its programmatic dependent may start at once; it must wait
    (``griddepcontrol.wait``) before it reads the vector."""
    n = t.numel()
    _zero_i32[(1,)](t, n, BLOCK=triton.next_power_of_2(max(n, 1)), LAUNCH_DEPENDENTS=launch_dependents)
