"""Data-free int4 rounding: choose each group's scale and zero-point to minimize its own error.

Min-max maps a group's [min, max] onto the 16 codes. On bell-shaped weights that wastes levels on the
one or two extreme values: a slightly smaller scale rounds the bulk of the group more finely and
clips the extremes a little, which costs less than it saves. This module searches that trade-off per
group, with no data::

    for f in a grid of range fractions (coarse, then fine around the best):
        s = round_to_scale_dtype(f * (hi - lo) / 15)        # the stored scale dequantizes
        for z in integers around the centre 7.5 - (lo + hi) / (2 s), clamped to 0..15:
            err(s, z) = sum_k h_k * (w_k - (clamp(round(w_k / s) + z, 0, 15) - z) * s)^2
    keep the (s, z) of least error per group, then refit the scale by least squares on the chosen
    codes, s = sum h w c / sum h c^2 with c = q - z (rounded to the scale dtype, kept only where it
    lowers the error), and re-round; repeated ``refine_steps`` times.

``lo = min(min(w), 0)``, ``hi = max(max(w), 0)`` as in min-max, and f = 1 with z = round(-lo / s) —
min-max itself — is always a candidate, so the result is never worse than min-max on the objective.
The weights ``h_k`` are 1 without data (the objective is then the weight's squared error, which is
the expected output error for inputs with uncorrelated, equal-variance features); the calibrated
tier passes the diagonal of the layer's input second moment E[x_k^2] instead (activation-aware).
Symmetric groups keep z = 8 and search ``s = f * max|w| / 7.5`` only.

Everything is vectorized over rows and groups (a Python loop runs over the 19 candidate scales and
3 zero-points each, not over groups), in float32 on the weight's device, in row chunks that bound
the temporary memory. On a CUDA GPU the same search runs as one Triton launch instead
(:mod:`quantkit.kernels.int4_search`: each program keeps its groups in registers through every candidate).
A finer grid (120 fractions, 7 zero-points, 3 refits) measured no better.
"""
from __future__ import annotations

import torch

from quantkit.reference.common import AMAX_EPS
from quantkit.reference.int4 import INT4_MAX_CODE, pack_int4, quantize_int4_with_qparams

# Range fractions tried first; the fine pass then tries FINE_OFFSETS around the best of them.
COARSE_FRACTIONS = (0.60, 0.66, 0.72, 0.76, 0.80, 0.83, 0.86, 0.89, 0.92, 0.95, 0.98, 1.0, 1.03)
FINE_OFFSETS = (-0.02, -0.01, 0.01, 0.02)
# Zero-points tried around the centred one for each scale.
ZERO_OFFSETS = (-1, 0, 1)


def _chunk_elements(device: torch.device) -> int:
    """Weights per chunk of rows. On a GPU, large chunks keep launches few (64 MiB per float32
    temporary); on a CPU, chunks whose temporaries stay in cache ran 2x faster (1024x4096, one core)."""
    return 1 << 24 if device.type == "cuda" else 1 << 18


def stored_scale(scale: torch.Tensor, scale_dtype: torch.dtype) -> torch.Tensor:
    """``scale`` (float32) rounded to ``scale_dtype`` and back: the value that dequantizes.

    A scale that underflows to zero in ``scale_dtype`` (an all-zero group) becomes the dtype's
    smallest normal number, so dividing by it stays finite and the group's codes equal its zero."""
    s = scale.clamp(min=AMAX_EPS).to(scale_dtype).float()
    return torch.where(s > 0, s, torch.finfo(scale_dtype).tiny)


class _Objective:
    """sum over each group of h * (w - dequant)^2, as the squared norm of sqrt(h) * (w - dequant)."""

    def __init__(self, w: torch.Tensor, h: torch.Tensor | None) -> None:
        self.w = w
        self.sqrt_h = None if h is None else h.sqrt()
        self.wh = w if h is None else w * self.sqrt_h

    def rounded(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(round(w / s), s * sqrt(h)) for scales ``s`` [R, G]: what every zero-point tried shares."""
        r = torch.round(self.w / s[..., None])
        return r, (s[..., None] if self.sqrt_h is None else s[..., None] * self.sqrt_h)

    def error(self, r: torch.Tensor, sh: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        zf = z[..., None]
        d = torch.addcmul(self.wh, torch.clamp(r, -zf, INT4_MAX_CODE - zf), sh, value=-1)
        return torch.linalg.vector_norm(d, dim=-1).square()

    def try_scale(self, s, zeros, best_err, best_s, best_z) -> None:
        """Evaluate scale ``s`` with each zero-point in ``zeros``; update the running best in place."""
        r, sh = self.rounded(s)
        for z in zeros:
            err = self.error(r, sh, z)
            better = err < best_err
            best_err.copy_(torch.where(better, err, best_err))
            best_s.copy_(torch.where(better, s, best_s))
            best_z.copy_(torch.where(better, z, best_z))


def _search_chunk(w: torch.Tensor, h: torch.Tensor | None, symmetric: bool, scale_dtype: torch.dtype,
                  refine_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """w [R, G, g] float32, h broadcastable to it or None -> (stored scale [R, G] float32, zero [R, G] float32)."""
    objective = _Objective(w, h)
    if symmetric:
        span = w.abs().amax(-1) / 7.5
        lo = mid = None
    else:
        lo = w.amin(-1).clamp(max=0)
        hi = w.amax(-1).clamp(min=0)
        span = (hi - lo) / INT4_MAX_CODE
        mid = (lo + hi) / 2

    def zeros_around(centre: torch.Tensor | None, s: torch.Tensor) -> list[torch.Tensor]:
        if symmetric:
            return [torch.full_like(s, 8)]
        if centre is None:  # the zero-point that centres the representable range on the group's
            centre = torch.round(7.5 - mid / s)
        return [(centre + o).clamp(0, INT4_MAX_CODE) for o in ZERO_OFFSETS]

    # min-max itself first, so the search can only improve on it
    best_s = stored_scale(span, scale_dtype)
    best_z = torch.full_like(best_s, 8) if symmetric else torch.round(-lo / best_s).clamp(0, INT4_MAX_CODE)
    best_err = objective.error(*objective.rounded(best_s), best_z)
    best_f = torch.ones_like(best_s)

    for f in COARSE_FRACTIONS:
        s = stored_scale(span * f, scale_dtype)
        before = best_err.clone()
        objective.try_scale(s, zeros_around(None, s), best_err, best_s, best_z)
        best_f = torch.where(best_err < before, f, best_f)
    # per-group fine pass around each group's own best coarse fraction
    for off in FINE_OFFSETS:
        s = stored_scale(span * (best_f + off), scale_dtype)
        objective.try_scale(s, zeros_around(None, s), best_err, best_s, best_z)

    for _ in range(refine_steps):
        r = torch.round(w / best_s[..., None])
        zf = best_z[..., None]
        c = torch.clamp(r, -zf, INT4_MAX_CODE - zf)
        hc = c if h is None else c * h
        num = (hc * w).sum(-1)
        den = (hc * c).sum(-1)
        s_ls = torch.where(den > 0, num / den.clamp(min=1e-30), best_s)
        s = stored_scale(s_ls, scale_dtype)
        # the refit scale may prefer a neighbouring zero-point
        objective.try_scale(s, zeros_around(best_z, s), best_err, best_s, best_z)
    return best_s, best_z


def int4_qparams_search(
    weight: torch.Tensor,
    group_size: int,
    symmetric: bool,
    scale_dtype: torch.dtype,
    importance: torch.Tensor | None = None,
    refine_steps: int = 2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Error-minimizing (scale [N, K/g] in ``scale_dtype``, zero-point uint8 [N, K/g]) for ``weight`` [N, K].

    ``importance`` [K] (non-negative, e.g. the mean squared input of each input feature) weights
    each column's squared error; None weighs them equally (data-free)."""
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D [out, in], got shape {tuple(weight.shape)}")
    n, k = weight.shape
    if group_size <= 0 or k % group_size:
        raise ValueError(f"int4: in_features={k} is not a multiple of group_size={group_size}")
    groups = k // group_size
    h = None
    if importance is not None:
        if importance.shape != (k,):
            raise ValueError(f"importance must have shape ({k},), got {tuple(importance.shape)}")
        if not bool(torch.isfinite(importance).all()) or bool((importance < 0).any()):
            raise ValueError("importance must be finite and non-negative")
        h = importance.detach().to(device=weight.device, dtype=torch.float32).view(1, groups, group_size)
    if _gpu_kernel_takes(weight, scale_dtype):
        from quantkit.kernels.int4_search import qparams_search

        # Triton launches on the current device's stream: the weight's device, not the caller's (cuda:1 of a
        # model spread over GPUs while cuda:0 is current), as ops.dispatch does for the layers' kernels
        with torch.no_grad(), torch.cuda.device(weight.device):
            scale, zero = qparams_search(weight.detach(), group_size, symmetric, scale_dtype,
                                         None if h is None else h.view(-1), refine_steps, COARSE_FRACTIONS,
                                         FINE_OFFSETS)
        return scale.to(scale_dtype), zero.to(torch.uint8)
    scale = torch.empty(n, groups, dtype=torch.float32, device=weight.device)
    zero = torch.empty(n, groups, dtype=torch.float32, device=weight.device)
    rows = max(1, _chunk_elements(weight.device) // k)
    with torch.no_grad():
        for r0 in range(0, n, rows):
            w = weight[r0:r0 + rows].detach().float().reshape(-1, groups, group_size)
            scale[r0:r0 + rows], zero[r0:r0 + rows] = _search_chunk(w, h, symmetric, scale_dtype, refine_steps)
    return scale.to(scale_dtype), zero.to(torch.uint8)


def _gpu_kernel_takes(weight: torch.Tensor, scale_dtype: torch.dtype) -> bool:
    """Whether the search runs as one Triton launch (:mod:`quantkit.kernels.int4_search`, the same algorithm
    with the weight read once: an 8B model's int4 ``quantize_`` took 9 s on an H100 with the PyTorch passes,
    1.1 s with the kernel) rather than as PyTorch passes: a CUDA weight, Triton importable, and
    ``QUANTKIT_BACKEND`` not ``reference``."""
    if not weight.is_cuda:
        return False
    from quantkit.ops.dispatch import _forced_backend

    if _forced_backend() == "reference":
        return False
    try:
        from quantkit.kernels import int4_search
    except ImportError:
        return False
    return int4_search.usable(weight, scale_dtype, ZERO_OFFSETS)


def quantize_weight_int4_search(
    weight: torch.Tensor,
    group_size: int = 128,
    symmetric: bool = False,
    scale_dtype: torch.dtype | None = None,
    importance: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Data-free error-minimizing int4: ``weight`` [N, K] -> (packed uint8 [N, K/2], scale, zero).

    Same signature and outputs as :func:`quantkit.reference.int4.quantize_weight_int4` (min-max), so
    it plugs into ``Int4WeightOnlyLinear.from_linear(..., quantizer=...)``."""
    scale_dtype = scale_dtype or weight.dtype
    scale, zero = int4_qparams_search(weight, group_size, symmetric, scale_dtype, importance)
    with torch.no_grad():
        q = quantize_int4_with_qparams(weight.detach(), scale, zero, group_size)
    return pack_int4(q), scale, zero
