"""Better int4 rounding than min-max, in two tiers (numbers in notes/accuracy.md).

- ``"search"`` (data-free, the default of the int4 recipe): per group, the scale and integer
  zero-point that minimize the group's squared error, found by a vectorized grid search over
  fractions of the min-max range plus a least-squares refit (:mod:`quantkit.rounding.search`).
- ``"gptq"`` (calibrated): GPTQ error feedback with the second moment of each layer's inputs on
  sample data, on top of the same search weighted by the input energy of each feature
  (:mod:`quantkit.rounding.gptq`, statistics from :mod:`quantkit.rounding.calibration`).
- ``"minmax"``: the plain rounding of :mod:`quantkit.reference.int4` (and its Triton quantizer).

Every method returns integer codes 0..15, zero-points 0..15 and scales already rounded to the scale
dtype, packed with :func:`quantkit.reference.int4.pack_int4`, so checkpoints and kernels are the same
whatever the rounding.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch

from quantkit.rounding.calibration import collect_input_moments, run_model
from quantkit.rounding.gptq import quantize_weight_int4_gptq
from quantkit.rounding.search import int4_qparams_search, quantize_weight_int4_search

#: int4 rounding methods, in order of cost
INT4_ROUNDINGS = ("minmax", "search", "gptq")
#: the methods that need the input statistics of each layer (calibration inputs)
CALIBRATED_ROUNDINGS = ("gptq",)
#: what a calibrated method falls back to for a layer no calibration input reached (an MoE expert no
#: token was routed to)
DATA_FREE_ROUNDING = "search"

Quantizer = Callable[[torch.Tensor, int, bool, torch.dtype], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def int4_quantizer(rounding: str, input_moment: torch.Tensor | None = None) -> Quantizer | None:
    """The ``quantizer(weight, group_size, symmetric, scale_dtype)`` for ``rounding``; None for
    ``"minmax"`` (the layer's own quantizer, Triton on the GPU). ``input_moment`` is E[x x^T] [K, K]
    of the layer's inputs, required by the calibrated methods."""
    if rounding not in INT4_ROUNDINGS:
        raise ValueError(f"unknown int4 rounding {rounding!r}; valid: {', '.join(INT4_ROUNDINGS)}")
    if rounding == "minmax":
        return None
    if rounding == "search":
        return quantize_weight_int4_search
    if input_moment is None:
        raise ValueError(f"int4 rounding {rounding!r} needs calibration inputs: pass them to "
                         f"quantize_(model, recipe, calibration=[input, ...])")
    return functools.partial(quantize_weight_int4_gptq, hessian=input_moment)


__all__ = [
    "INT4_ROUNDINGS",
    "CALIBRATED_ROUNDINGS",
    "DATA_FREE_ROUNDING",
    "int4_quantizer",
    "int4_qparams_search",
    "quantize_weight_int4_search",
    "quantize_weight_int4_gptq",
    "collect_input_moments",
    "run_model",
]
