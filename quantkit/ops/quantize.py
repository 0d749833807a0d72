"""Weight quantization entry points used by the layers' ``from_linear``.

They run the family's Triton quantizer when the weight is on a GPU that has one, and the reference
otherwise; both produce the same codes and scales (the kernels are tested bit-exact against the
reference). On the ``meta`` device only shapes and dtypes are produced, without computing anything.
"""
from __future__ import annotations

import torch

from quantkit.ops.dispatch import resolve


def quantize_weight(family: str, weight: torch.Tensor, *args, **kwargs):
    """``family`` is one of fp8_block, int8_dynamic, int8_weight_only, int4_weight_only."""
    with torch.no_grad():
        impl = resolve(family, "quantize_weight", weight.device)
        return impl(weight.detach(), *args, **kwargs)
