"""The read floor: how long the fastest plain read of B bytes takes under the benchmark's own timer.

A decode-size layer (M <= 16) must bring its weight, x and y through device memory once, and no kernel does
that faster than one that does nothing else. Timed by the same ``do_bench`` as the benchmark's rows, the
floor is the least time that timer can show for those bytes, and bf16's time over the floor of a recipe's
bytes is the largest speedup over bf16 that any kernel for that recipe could show in that cell.

The timer matters here. ``do_bench`` clears L2 before every call by zeroing a 256 MB buffer, which leaves
L2 full of dirty lines; the timed reads evict them, and their write-back shares DRAM with the reads. On an
H100 a plain read of 30.7 MB took 18.5 µs after that flush and 14.6 µs after one that left clean lines
(notes/results/round25/l2_flush_state.log), and the floor grows as about 5.3 µs + B / 2.8 TB/s
(``read_floor.log``: 8.8 MB 8.5 µs, 16.8 MB 11.3, 30.7 MB 16.4, 58.7 MB 25.6, 117.4 MB 46.4; bf16
``F.linear`` at M = 1 on 117.4 MB of weight took 54.2-56.6 µs in the same run).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import triton
import triton.language as tl

#: (words a program, warps) of the read kernel timed for a floor. A grid of 28 on an H100 (one block a
#: program or persistent programs with 2-4 blocks in flight, 4 or 8 warps, with and without the evict-first
#: policy; ``scripts/probe_read_floor.py``) put one of these, evict-first, first at 8 of 9 sizes from 8.8 to
#: 117.4 MB; at the ninth a persistent config led with 11.66 µs at 16.78 MB, where (4096, 4) took 11.26 µs
#: at 16.79 MB.
CONFIGS = ((4096, 4), (4096, 8), (8192, 4), (16384, 8))


@triton.jit
def _xor(a, b):
    return a ^ b


@triton.jit
def _read_kernel(src, out, n, BLOCK: tl.constexpr):
    """out[p] = the XOR of int32 words src[p·BLOCK : (p + 1)·BLOCK] (words past n read as 0): every word
    read once, evict-first (read once, as a layer reads its weight), and one word written a program so
    that nothing read can be left out."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(src + offs, mask=offs < n, other=0, eviction_policy="evict_first")
    tl.store(out + tl.program_id(0), tl.reduce(v, 0, _xor))


def read_xor(src: torch.Tensor, out: torch.Tensor | None = None, block: int = 4096, num_warps: int = 4):
    """The read kernel over a contiguous int32 tensor: one XOR a ``block`` of words (``out``, or a new
    int32 tensor of ceil(numel / block) words)."""
    if src.dtype != torch.int32 or not src.is_contiguous():
        raise ValueError(f"the read kernel takes a contiguous int32 tensor, got {src.dtype}, "
                         f"strides {tuple(src.stride())}")
    n = src.numel()
    programs = triton.cdiv(n, block)
    if out is None:
        out = torch.empty(programs, dtype=torch.int32, device=src.device)
    elif out.numel() < programs or out.dtype != torch.int32:
        raise ValueError(f"out needs {programs} int32 words, got {out.numel()} {out.dtype}")
    _read_kernel[(programs,)](src, out, n, BLOCK=block, num_warps=num_warps)
    return out


def read_floor_ms(nbytes: int, device: torch.device | str, measure: Callable[[Callable[[], Any]], float],
                  configs=CONFIGS) -> float:
    """The least median time ``measure`` (the benchmark's timer, in ms) gives a plain read of ``nbytes``
    (rounded up to whole words) over the read kernel's ``configs``: fresh random words, so that nothing
    is served from a cache the timer does not clear."""
    if nbytes <= 0:
        raise ValueError(f"nbytes must be positive, got {nbytes}")
    words = -(-nbytes // 4)
    src = torch.randint(-2**31, 2**31 - 1, (words,), dtype=torch.int32, device=device)
    out = torch.empty(triton.cdiv(words, min(b for b, _ in configs)), dtype=torch.int32, device=device)
    return min(measure(lambda b=b, w=w: read_xor(src, out, b, w)) for b, w in configs)
