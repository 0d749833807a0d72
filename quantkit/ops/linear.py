"""The quantized linear forwards as ``torch.library`` custom ops.

Each op takes the activation ``x`` of any leading shape [..., K] and the layer's buffers, flattens
``x`` to [M, K], calls the implementation that :mod:`quantkit.ops.dispatch` picks for the device
(Triton kernel or reference) and restores the leading shape. Every op has a fake (meta)
implementation, so quantized models trace under ``torch.compile(fullgraph=True)``, and an autograd
rule that raises: quantized layers are inference-only.

The plain-Python entry points (``fp8_block_linear`` ...) skip the dispatcher in eager mode when no
gradient is being recorded — the op's own overhead is then not paid on every decode step — and go
through ``torch.ops.quantkit.*`` when compiling or when ``x`` requires grad.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor

from quantkit.ops.dispatch import resolve

_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _check_input(x: Tensor, weight: Tensor, in_features: int, layer) -> None:
    """Cheap checks on every call; ``layer`` (a label or a module with ``_label``) only for messages."""
    if x.dtype not in _FLOAT_DTYPES or x.dim() == 0 or x.shape[-1] != in_features or (
            x.device != weight.device and not (x.is_meta or weight.is_meta)):
        label = getattr(layer, "_label", layer)
        if x.dim() == 0 or x.shape[-1] != in_features:
            raise ValueError(f"{label}: expected input with last dimension {in_features}, got shape {tuple(x.shape)}")
        if x.dtype not in _FLOAT_DTYPES:
            raise TypeError(f"{label}: input dtype must be bfloat16, float16 or float32, got {x.dtype}")
        raise ValueError(f"{label}: input is on {x.device} but the quantized weight is on {weight.device}; "
                         f"move the model with model.to({str(x.device)!r})")


def _run_2d(impl: Callable, x: Tensor, out_features: int, *args) -> Tensor:
    if x.dim() == 2 and x.stride(1) == 1:  # the common case: no reshapes at all
        if x.shape[0] == 0:
            return x.new_empty(0, out_features)
        return impl(x, *args)
    x2 = x.reshape(-1, x.shape[-1])
    if x2.shape[0] == 0:
        return x.new_empty(*x.shape[:-1], out_features)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = impl(x2, *args)
    return y.reshape(*x.shape[:-1], out_features)


def _raise_no_backward(layer: str) -> Callable:
    def backward(ctx, grad):
        raise RuntimeError(
            f"{layer} is inference-only: quantized layers have no backward. Run the model under "
            f"torch.no_grad() / torch.inference_mode(), or keep the modules you train in high precision "
            f"(quantize_(..., ignore=[...]))."
        )

    def setup_context(ctx, inputs, output):
        pass

    return backward, setup_context


def _register(op, layer: str) -> None:
    backward, setup_context = _raise_no_backward(layer)
    op.register_autograd(backward, setup_context=setup_context)


# --------------------------------------------------------------------------- fp8 block
@torch.library.custom_op("quantkit::fp8_block_linear", mutates_args=())
def _fp8_block_linear_op(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor],
                         block_size: int, scale_fmt: str) -> Tensor:
    impl = resolve("fp8_block", "linear", x.device)
    return _run_2d(impl, x, weight.shape[0], weight, weight_scale, bias, block_size, scale_fmt or None)


@_fp8_block_linear_op.register_fake
def _(x, weight, weight_scale, bias, block_size, scale_fmt):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


_register(_fp8_block_linear_op, "Fp8BlockLinear")


def fp8_block_linear(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor],
                     block_size: int = 128, scale_fmt: Optional[str] = None,
                     layer="Fp8BlockLinear") -> Tensor:
    _check_input(x, weight, weight.shape[1], layer)
    if _use_op(x):
        return _fp8_block_linear_op(x, weight, weight_scale, bias, block_size, scale_fmt or "")
    impl = resolve("fp8_block", "linear", x.device)
    return _run_2d(impl, x, weight.shape[0], weight, weight_scale, bias, block_size, scale_fmt)


# --------------------------------------------------------------------------- int8 dynamic
@torch.library.custom_op("quantkit::int8_dynamic_linear", mutates_args=())
def _int8_dynamic_linear_op(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor]) -> Tensor:
    impl = resolve("int8_dynamic", "linear", x.device)
    return _run_2d(impl, x, weight.shape[0], weight, weight_scale, bias)


@_int8_dynamic_linear_op.register_fake
def _(x, weight, weight_scale, bias):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


_register(_int8_dynamic_linear_op, "Int8DynamicLinear")


def int8_dynamic_linear(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor],
                        layer="Int8DynamicLinear") -> Tensor:
    _check_input(x, weight, weight.shape[1], layer)
    if _use_op(x):
        return _int8_dynamic_linear_op(x, weight, weight_scale, bias)
    impl = resolve("int8_dynamic", "linear", x.device)
    return _run_2d(impl, x, weight.shape[0], weight, weight_scale, bias)


# --------------------------------------------------------------------------- int8 weight-only
@torch.library.custom_op("quantkit::int8_weight_only_linear", mutates_args=())
def _int8_weight_only_linear_op(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor]) -> Tensor:
    impl = resolve("int8_weight_only", "linear", x.device)
    return _run_2d(impl, x, weight.shape[0], weight, weight_scale, bias)


@_int8_weight_only_linear_op.register_fake
def _(x, weight, weight_scale, bias):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


_register(_int8_weight_only_linear_op, "Int8WeightOnlyLinear")


def int8_weight_only_linear(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor],
                            layer="Int8WeightOnlyLinear") -> Tensor:
    _check_input(x, weight, weight.shape[1], layer)
    if _use_op(x):
        return _int8_weight_only_linear_op(x, weight, weight_scale, bias)
    impl = resolve("int8_weight_only", "linear", x.device)
    return _run_2d(impl, x, weight.shape[0], weight, weight_scale, bias)


# --------------------------------------------------------------------------- int4 weight-only
@torch.library.custom_op("quantkit::int4_weight_only_linear", mutates_args=())
def _int4_weight_only_linear_op(x: Tensor, weight_packed: Tensor, weight_scale: Tensor,
                                weight_zero_point: Tensor, bias: Optional[Tensor], group_size: int) -> Tensor:
    impl = resolve("int4_weight_only", "linear", x.device)
    return _run_2d(impl, x, weight_scale.shape[0], weight_packed, weight_scale, weight_zero_point, bias, group_size)


@_int4_weight_only_linear_op.register_fake
def _(x, weight_packed, weight_scale, weight_zero_point, bias, group_size):
    return x.new_empty(*x.shape[:-1], weight_scale.shape[0])


_register(_int4_weight_only_linear_op, "Int4WeightOnlyLinear")


def int4_weight_only_linear(x: Tensor, weight_packed: Tensor, weight_scale: Tensor, weight_zero_point: Tensor,
                            bias: Optional[Tensor], group_size: int, in_features: int,
                            layer="Int4WeightOnlyLinear") -> Tensor:
    _check_input(x, weight_packed, in_features, layer)
    if _use_op(x):
        return _int4_weight_only_linear_op(x, weight_packed, weight_scale, weight_zero_point, bias, group_size)
    impl = resolve("int4_weight_only", "linear", x.device)
    return _run_2d(impl, x, weight_scale.shape[0], weight_packed, weight_scale, weight_zero_point, bias,
                   group_size)


def _use_op(x: Tensor) -> bool:
    """Go through the dispatcher only where it matters: compiling, meta tensors, or autograd recording."""
    return (torch.compiler.is_compiling() or x.is_meta
            or (x.requires_grad and torch.is_grad_enabled()))
