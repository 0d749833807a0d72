"""What every quantized linear layer shares: shape bookkeeping, dtype-safe moves, dequantize()."""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn


class QuantizedLinear(nn.Module):
    """Base class of the quantized replacements for ``nn.Linear``.

    The weight is frozen: a backward gives the input its gradient through the dequantized weight (and a
    ``bias`` that requires grad its own), so modules around the quantized ones can be trained; see
    :mod:`quantkit.ops.linear`.

    State lives in named buffers only (``weight``/``weight_packed``, ``weight_scale``, ...,
    ``bias``), so ``state_dict()``, ``load_state_dict(assign=True)`` and ``.to(device)`` work as for
    any module. ``.to(dtype)`` / ``.half()`` / ``.bfloat16()`` convert only ``bias``: quantized codes
    and scales keep their dtype (casting fp8 codes or float32 scales would silently change the
    numerics). The output dtype always follows the input's.
    """

    #: recipe name this layer implements, e.g. "fp8-block"
    format_name: ClassVar[str] = ""
    #: buffers whose dtype is part of the format and must survive model-wide dtype casts
    quantized_buffers: ClassVar[tuple[str, ...]] = ()

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        if in_features <= 0 or out_features <= 0:
            raise ValueError(f"in_features and out_features must be positive, got {in_features}, {out_features}")
        self.in_features = in_features
        self.out_features = out_features
        #: fully-qualified name in the model, set by quantize_ so errors can name the module
        self.module_name = ""

    def _register_bias(self, bias: bool, dtype: torch.dtype, device) -> None:
        self.register_buffer("bias", torch.empty(self.out_features, dtype=dtype, device=device) if bias else None)

    @property
    def _label(self) -> str:
        return f"{type(self).__name__} {self.module_name!r}" if self.module_name else type(self).__name__

    def _apply(self, fn, recurse=True):
        kept = {name: self._buffers[name] for name in self.quantized_buffers if self._buffers.get(name) is not None}
        super()._apply(fn, recurse)
        for name, before in kept.items():
            after = self._buffers[name]
            if after.dtype != before.dtype:
                # fn changed the dtype (model.to(dtype), .half(), ...): redo only its device move.
                self._buffers[name] = before.to(device=after.device)
        return self

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight [out_features, in_features] this layer effectively multiplies by."""
        raise NotImplementedError

    def kernel_args(self) -> tuple:
        """The arguments after ``x`` of the format's ``linear`` (kernel module and reference alike)."""
        raise NotImplementedError

    def weight_nbytes(self) -> int:
        """Bytes of all buffers (quantized weight, scales, zero-points, bias)."""
        return sum(b.numel() * b.element_size() for b in self.buffers(recurse=False))

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, format={self.format_name}")
