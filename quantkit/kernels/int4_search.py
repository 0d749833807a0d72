"""int4 rounding search on the GPU: each group's error-minimizing scale and zero-point in one launch.

The algorithm is :mod:`quantkit.rounding.search`'s, step for step. It runs min-max, then the coarse range
fractions, then the fine offsets around each group's best fraction, then the least-squares refits. Each
candidate scale is rounded to the scale dtype and tried with three zero-points, and a candidate is kept on a
strictly smaller error. There it is a few dozen PyTorch passes over the whole weight in float32 for each
candidate: 9 s for an 8B model on an H100. Here one program holds BLOCK_G groups in registers and tries every
candidate on them, so the weight is read once.

Arithmetic as in the PyTorch version: IEEE division (``div_rn``), round half to even, the scale rounded to
the scale dtype half to even (by integer arithmetic on its bits, which Triton's interpreter gets right too),
no fused multiply-adds. The error sums run in another order (a tree over the group) than
``torch.linalg.vector_norm``, and the sum is not rounded through a square root. So where two candidates'
errors are within a rounding of each other, the two versions may keep different ones, both as good to
float32 precision; a group's later candidates then follow from that choice (tests/kernels/test_int4_search.py).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from quantkit.kernels.launch import cached
from quantkit.reference.common import AMAX_EPS

_SCALE_KINDS = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
# The zero-points tried around each centre: the kernel's are fixed (-1, 0, +1), as search.ZERO_OFFSETS.
ZERO_OFFSETS = (-1, 0, 1)


@triton.jit
def _rint(x):
    """Round half to even in float32: adding and subtracting 1.5·2^23 rounds |x| < 2^22 to an integer;
    larger magnitudes are clamped to a code bound wherever this is used."""
    return tl.where(tl.abs(x) < 4194304.0, (x + 12582912.0) - 12582912.0, x)


@triton.jit
def _to_bf16_and_back(x):
    """x (positive, finite, normal) rounded to bfloat16, half to even, by integer arithmetic on its bits:
    exact on the GPU and in Triton's interpreter alike (whose float32 -> bfloat16 cast truncates)."""
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _to_fp16_and_back(x):
    """x (positive, finite) rounded to float16, half to even: 10 mantissa bits from 2^-14 up, multiples
    of 2^-24 below (float16's subnormals). Past 65504 the cast would overflow; scales never get there."""
    bits = x.to(tl.int32, bitcast=True)
    normal = ((bits + 0x0FFF + ((bits >> 13) & 1)) & -8192).to(tl.float32, bitcast=True)
    sub = _rint(x * 16777216.0) * 5.960464477539063e-08
    return tl.where(x >= 6.103515625e-05, normal, sub)


@triton.jit
def _stored(x, SCALE_KIND: tl.constexpr, EPS: tl.constexpr):
    """The scale as stored and read back: floored at EPS (AMAX_EPS), rounded to the scale dtype; a scale that
    underflows to zero there becomes the dtype's smallest normal number (search.stored_scale)."""
    x = tl.maximum(x, EPS)
    if SCALE_KIND == 1:
        x = _to_bf16_and_back(x)
        x = tl.where(x > 0, x, 1.1754943508222875e-38)
    elif SCALE_KIND == 2:
        x = _to_fp16_and_back(x)
        x = tl.where(x > 0, x, 6.103515625e-05)
    else:
        x = tl.where(x > 0, x, 1.1754943508222875e-38)
    return x


@triton.jit
def _error(wh, r, sh, z):
    """sum over each group of (sqrt(h)·w - sqrt(h)·s·(clamp(round(w / s), -z, 15 - z)))^2."""
    zc = z[:, None]
    d = wh - tl.minimum(tl.maximum(r, -zc), 15.0 - zc) * sh
    return tl.sum(d * d, axis=1)


@triton.jit
def _keep(err, s, z, best_err, best_s, best_z):
    better = err < best_err
    return tl.where(better, err, best_err), tl.where(better, s, best_s), tl.where(better, z, best_z)


@triton.jit
def _try_scale(w, wh, sqrt_h, s, centre, best_err, best_s, best_z, SYM: tl.constexpr, HAS_H: tl.constexpr):
    """Scale ``s`` [BLOCK_G] with the zero-points centre - 1, centre, centre + 1 (clamped to 0..15), or 8
    for symmetric groups, in that order; the running best updated on a strictly smaller error."""
    r = _rint(tl.div_rn(w, s[:, None]))
    if HAS_H:
        sh = s[:, None] * sqrt_h
    else:
        sh = s[:, None]
    if SYM:
        z = tl.full(s.shape, 8.0, tl.float32)
        best_err, best_s, best_z = _keep(_error(wh, r, sh, z), s, z, best_err, best_s, best_z)
    else:
        for o in tl.static_range(3):
            z = tl.minimum(tl.maximum(centre + (o - 1), 0.0), 15.0)
            best_err, best_s, best_z = _keep(_error(wh, r, sh, z), s, z, best_err, best_s, best_z)
    return best_err, best_s, best_z


# Not specialized on the group counts' divisibility: one compilation serves every layer shape (a first quantize_
# otherwise compiles again for, say, K / group = 2 against 32). The row stride stays specialized: its
# divisibility by 16 is what lets the weight loads be 16-byte vectors (4-5x faster on an H100).
@triton.jit(do_not_specialize=["Q", "GROUPS_PER_ROW"])
def _search_kernel(w_ptr, h_ptr, frac_ptr, off_ptr, scale_ptr, zero_ptr, Q, GROUPS_PER_ROW, stride_w,
                   NUM_COARSE: tl.constexpr, NUM_FINE: tl.constexpr, REFINE: tl.constexpr, SYM: tl.constexpr,
                   HAS_H: tl.constexpr, GROUP: tl.constexpr, BLOCK_G: tl.constexpr, SCALE_KIND: tl.constexpr,
                   EPS: tl.constexpr):
    """One program: BLOCK_G groups of GROUP weights (rows of W's [N, K / GROUP] groups, row-major), through
    min-max, NUM_COARSE range fractions, NUM_FINE offsets around each group's best fraction and REFINE
    least-squares refits (the candidate counts are constexpr: loops over them compile as loops). Writes the
    stored scale and the zero-point of each group as float32."""
    pid = tl.program_id(0)
    q = pid * BLOCK_G + tl.arange(0, BLOCK_G)  # group ids, row-major over [N, K / GROUP]
    ok = q < Q
    row = q // GROUPS_PER_ROW
    col0 = (q % GROUPS_PER_ROW) * GROUP
    j = tl.arange(0, GROUP)
    w = tl.load(w_ptr + row.to(tl.int64)[:, None] * stride_w + col0[:, None] + j[None, :], mask=ok[:, None],
                other=0.0).to(tl.float32)
    if HAS_H:
        h = tl.load(h_ptr + col0[:, None] + j[None, :], mask=ok[:, None], other=0.0)
        sqrt_h = tl.sqrt_rn(h)
        wh = w * sqrt_h
    else:
        h = w  # unused
        sqrt_h = w  # unused
        wh = w
    if SYM:
        span = tl.div_rn(tl.max(tl.abs(w), axis=1), 7.5)
        mid = span  # unused
        best_s = _stored(span, SCALE_KIND, EPS)
        best_z = tl.full(span.shape, 8.0, tl.float32)
    else:
        lo = tl.minimum(tl.min(w, axis=1), 0.0)
        hi = tl.maximum(tl.max(w, axis=1), 0.0)
        span = tl.div_rn(hi - lo, 15.0)
        mid = (lo + hi) * 0.5
        best_s = _stored(span, SCALE_KIND, EPS)
        best_z = tl.minimum(tl.maximum(_rint(tl.div_rn(-lo, best_s)), 0.0), 15.0)
    # min-max first, so the search can only improve on it
    if HAS_H:
        sh0 = best_s[:, None] * sqrt_h
    else:
        sh0 = best_s[:, None]
    best_err = _error(wh, _rint(tl.div_rn(w, best_s[:, None])), sh0, best_z)
    best_f = tl.full(span.shape, 1.0, tl.float32)
    for i in range(NUM_COARSE):
        f = tl.load(frac_ptr + i)
        s = _stored(span * f, SCALE_KIND, EPS)
        centre = _rint(7.5 - tl.div_rn(mid, s))
        before = best_err
        best_err, best_s, best_z = _try_scale(w, wh, sqrt_h, s, centre, best_err, best_s, best_z, SYM, HAS_H)
        best_f = tl.where(best_err < before, f, best_f)
    for i in range(NUM_FINE):
        s = _stored(span * (best_f + tl.load(off_ptr + i)), SCALE_KIND, EPS)
        centre = _rint(7.5 - tl.div_rn(mid, s))
        best_err, best_s, best_z = _try_scale(w, wh, sqrt_h, s, centre, best_err, best_s, best_z, SYM, HAS_H)
    for _ in range(REFINE):
        zc = best_z[:, None]
        c = tl.minimum(tl.maximum(_rint(tl.div_rn(w, best_s[:, None])), -zc), 15.0 - zc)
        if HAS_H:
            hc = c * h
        else:
            hc = c
        num = tl.sum(hc * w, axis=1)
        den = tl.sum(hc * c, axis=1)
        s = _stored(tl.where(den > 0, tl.div_rn(num, tl.maximum(den, 1e-30)), best_s), SCALE_KIND, EPS)
        best_err, best_s, best_z = _try_scale(w, wh, sqrt_h, s, best_z, best_err, best_s, best_z, SYM, HAS_H)
    tl.store(scale_ptr + q, best_s, mask=ok)
    tl.store(zero_ptr + q, best_z, mask=ok)


_search = cached(_search_kernel)


def usable(weight: torch.Tensor, scale_dtype: torch.dtype, zero_offsets) -> bool:
    """Whether the kernel takes the search: a float weight, a scale dtype it rounds to, the zero-points it
    tries; on a GPU (the kernel converts to bf16, so sm_80 or newer) or under Triton's interpreter."""
    return (weight.dtype in _SCALE_KINDS and scale_dtype in _SCALE_KINDS and tuple(zero_offsets) == ZERO_OFFSETS
            and weight.dim() == 2 and (not weight.is_cuda or torch.cuda.get_device_capability(weight.device)[0] >= 8))


def qparams_search(weight: torch.Tensor, group_size: int, symmetric: bool, scale_dtype: torch.dtype,
                   importance: torch.Tensor | None, refine_steps: int, coarse_fractions, fine_offsets,
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(stored scale [N, K / g] float32, zero-point [N, K / g] float32) for ``weight`` [N, K], as
    :func:`quantkit.rounding.search._search_chunk` chooses them. ``importance``: [K] float32 or None."""
    n, k = weight.shape
    groups = k // group_size
    if weight.stride(1) != 1:
        weight = weight.contiguous()
    device = weight.device
    fractions = torch.tensor(coarse_fractions, dtype=torch.float32, device=device)
    offsets = torch.tensor(fine_offsets, dtype=torch.float32, device=device)
    scale = torch.empty(n, groups, dtype=torch.float32, device=device)
    zero = torch.empty(n, groups, dtype=torch.float32, device=device)
    h = None if importance is None else importance.detach().to(device=device, dtype=torch.float32).contiguous()
    block_g = max(1, 4096 // group_size)
    q = n * groups
    _search[(triton.cdiv(q, block_g),)](
        weight, h if h is not None else weight, fractions, offsets, scale, zero, q, groups, weight.stride(0),
        NUM_COARSE=len(coarse_fractions), NUM_FINE=len(fine_offsets), REFINE=refine_steps, SYM=bool(symmetric),
        HAS_H=h is not None,
        GROUP=group_size, BLOCK_G=block_g, SCALE_KIND=_SCALE_KINDS[scale_dtype], EPS=AMAX_EPS,
        num_warps=4, enable_fp_fusion=False)  # products rounded before the subtraction, as the PyTorch search
    return scale, zero

