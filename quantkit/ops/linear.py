"""The quantized linear forwards as ``torch.library`` custom ops.

Each op takes the activation ``x`` of any leading shape [..., K] and the layer's buffers, flattens
``x`` to [M, K], calls the implementation that :mod:`quantkit.ops.dispatch` picks for the device
(Triton kernel or reference) and restores the leading shape. Every op has a fake (meta)
implementation, so quantized models trace under ``torch.compile(fullgraph=True)``, and an autograd
rule for the input: the weight is frozen (its codes and scales are buffers, with no gradient), and
``x`` gets ``grad_y @ W``, ``W`` the weight the layer multiplies by (``layer.dequantize()``). That is
exact for the weight-only formats, and the straight-through estimator for the two that quantize the
activation too (fp8-block, int8-dynamic), as in QLoRA-style training of adapters on a quantized base.
A ``bias`` that requires grad gets the sum of ``grad_y``. The input gradient is its own custom op
(``*_grad_input``): the weight dequantized by the family's Triton kernel on a GPU that has one, the
reference elsewhere, then one matmul in the gradient's dtype.

The plain-Python entry points (``fp8_block_linear`` ...) go through ``torch.ops.quantkit.*`` only when
compiling (or on meta tensors). In eager mode they skip the dispatcher, whose overhead would otherwise be
paid on every decode step; where autograd records (``x`` or a bias requires grad, forward-mode AD, a
``torch.func`` transform) they apply the same autograd rule as a ``torch.autograd.Function``
(:class:`_EagerLinear`).
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import torch
import torch.autograd.forward_ad as _forward_ad
from torch import Tensor

from quantkit.ops.dispatch import reference_function, resolve

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


def _follows_autocast(linear: Callable) -> Callable:
    """``linear`` (an entry point below) as ``nn.Linear`` computes under ``torch.autocast``: ``x`` cast to the
    autocast dtype of its device (``linear`` is on autocast's lower-precision list), the output in that dtype. A
    quantized model under a mixed-precision loop otherwise ran its float32 activations through the float32 kernel
    paths. The call itself runs with autocast off, so that the reference's float32 arithmetic stays float32. One
    C query (~0.2 µs) where autocast is off."""

    @functools.wraps(linear)
    def wrapper(x: Tensor, *args, **kwargs) -> Tensor:
        device_type = "cuda" if x.is_cuda else x.device.type
        if x.is_meta or not torch.is_autocast_enabled(device_type):  # (autocast has no meta device type)
            return linear(x, *args, **kwargs)
        dtype = torch.get_autocast_dtype(device_type)
        if x.dtype in _FLOAT_DTYPES and dtype in _FLOAT_DTYPES:
            x = x.to(dtype)
        with torch.autocast(device_type, enabled=False):
            return linear(x, *args, **kwargs)

    return wrapper


def _check_frozen(layer, weight: Tensor, weight_scale: Tensor) -> None:
    """Raise where autograd records and a float buffer of the weight (fp8 codes, a scale) requires grad. No path
    gives it a gradient (the kernels and both autograd rules hold it constant), but the CPU reference's arithmetic
    would record one where nothing else does: a gradient on the CPU, silently none on a GPU."""
    if (weight.requires_grad or weight_scale.requires_grad) and torch.is_grad_enabled():
        named = [name for name, t in (("weight", weight), ("weight_scale", weight_scale)) if t.requires_grad]
        label = getattr(layer, "_label", layer)
        raise RuntimeError(f"{label}: the quantized weight is frozen and gets no gradient, but its buffer "
                           f"{', '.join(named)} requires grad; call .requires_grad_(False) on it (train an "
                           f"adapter or the bias instead)")


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


_LIB = torch.library.Library("quantkit", "DEF")


class _Op:
    """A ``quantkit::`` operator defined with ``torch.library.Library``: the dispatcher calls ``fn`` itself.
    ``torch.library.custom_op`` wraps it in Python layers of its own (an aliasing check, a frame that Dynamo
    skips), ~20 µs of host time a call with the rest of its dispatch on the H100 host (round 36), paid once per
    quantized layer and step by a model compiled without CUDA graphs. Callable like the op; ``register_fake``,
    ``register_autograd`` and ``register_vmap`` as on a custom op."""

    def __init__(self, name: str, schema: str, fn: Callable) -> None:
        _LIB.define(name + schema)
        _LIB.impl(name, fn, "CompositeExplicitAutograd")
        self.name = f"quantkit::{name}"
        self._op = getattr(torch.ops.quantkit, name).default

    def __call__(self, *args):
        return self._op(*args)

    def register_fake(self, fn: Callable) -> Callable:
        torch.library.register_fake(self.name, fn, lib=_LIB)
        return fn

    def register_autograd(self, backward: Callable, *, setup_context: Callable) -> None:
        torch.library.register_autograd(self.name, backward, setup_context=setup_context, lib=_LIB)

    def register_vmap(self, fn: Callable) -> None:
        torch.library.register_vmap(self.name, fn, lib=_LIB)


def _op(name: str, schema: str) -> Callable[[Callable], _Op]:
    return lambda fn: _Op(name, schema, fn)


def _register(op, grad_input, weight_args: tuple[int, ...], bias_index: int) -> None:
    """The autograd rule of ``op``: ``x`` (input 0) gets ``grad_input(grad_2d, *(inputs[i] for i in
    weight_args))``, and a bias (input ``bias_index``) that requires grad the output gradient summed
    over rows. The weight's buffers get none."""

    def setup_context(ctx, inputs, output):
        x, bias = inputs[0], inputs[bias_index]
        ctx.x_shape = x.shape
        ctx.bias_dtype = bias.dtype if bias is not None and bias.requires_grad else None
        ctx.input_count = len(inputs)
        weight = [inputs[i] for i in weight_args]
        ctx.save_for_backward(*(t for t in weight if isinstance(t, Tensor)))
        ctx.weight_args = [None if isinstance(t, Tensor) else t for t in weight]  # None: a saved tensor

    def backward(ctx, grad):
        saved = iter(ctx.saved_tensors)
        args = [next(saved) if a is None else a for a in ctx.weight_args]
        grads = [None] * ctx.input_count
        grads[0], grads[bias_index] = _input_and_bias_grads(ctx, grad, lambda g: grad_input(g, *args))
        return tuple(grads)

    op.register_autograd(backward, setup_context=setup_context)


def _input_and_bias_grads(ctx, grad: Tensor, grad_input: Callable) -> tuple:
    """(x's gradient, the bias's) from the output's ``grad`` [..., N]: ``grad_input`` of the 2-D gradient where x
    needs one; the rows' float32 sum in the bias dtype where ``ctx.bias_dtype`` is set; None otherwise."""
    grad_2d = grad.reshape(-1, grad.shape[-1])
    grad_x = grad_input(grad_2d).reshape(ctx.x_shape) if ctx.needs_input_grad[0] else None
    grad_bias = None if ctx.bias_dtype is None else grad_2d.sum(0, dtype=torch.float32).to(ctx.bias_dtype)
    return grad_x, grad_bias


def _dequantized(family: str, dtype: torch.dtype, *weight) -> Tensor:
    """The layer's weight [N, K] in ``dtype``: the family's Triton dequantizer on a GPU, else the reference."""
    return resolve(family, "dequantize_weight", weight[0].device)(*weight, dtype=dtype)


def _reference_dequantized(family: str, dtype: torch.dtype, *weight) -> Tensor:
    """:func:`_dequantized` by the PyTorch reference, whatever the device."""
    return reference_function(family, "dequantize_weight")(*weight, dtype=dtype)


def _no_double_backward(layer: str) -> Callable:
    def backward(ctx, grad):
        raise RuntimeError(f"{layer}: second-order gradients through a quantized layer are not supported")

    return backward


def _register_grad_input(op, layer: str) -> None:
    op.register_autograd(_no_double_backward(layer), setup_context=lambda ctx, inputs, output: None)

    def batched(info, in_dims, grad, *weight):
        """vmap over the backward (per-sample gradients, jacrev): the batch is more rows of one call, where
        vmap's fallback would dequantize the weight once a sample."""
        if any(d is not None for d in in_dims[1:]):
            raise NotImplementedError(f"{layer}: vmap over the quantized weight's buffers is not supported")
        if in_dims[0] is None:
            return op(grad, *weight), None
        grad = grad.movedim(in_dims[0], 0)
        out = op(grad.reshape(-1, grad.shape[-1]), *weight)
        return out.reshape(*grad.shape[:-1], out.shape[-1]), 0

    op.register_vmap(batched)


# --------------------------------------------------------------------------- fp8 block
@_op("fp8_block_linear", "(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias, int block_size, str scale_fmt) -> Tensor")
def _fp8_block_linear_op(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor],
                         block_size: int, scale_fmt: str) -> Tensor:
    impl = resolve("fp8_block", "linear", x.device)
    return _run_2d(impl, x, weight.shape[0], weight, weight_scale, bias, block_size, scale_fmt or None)


@_fp8_block_linear_op.register_fake
def _(x, weight, weight_scale, bias, block_size, scale_fmt):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


def _fp8_block_grad_input(grad: Tensor, weight: Tensor, weight_scale: Tensor, block_size: int) -> Tensor:
    return grad @ _dequantized("fp8_block", grad.dtype, weight, weight_scale, block_size)


@_op("fp8_block_linear_grad_input", "(Tensor grad, Tensor weight, Tensor weight_scale, int block_size) -> Tensor")
def _fp8_block_grad_input_op(grad: Tensor, weight: Tensor, weight_scale: Tensor, block_size: int) -> Tensor:
    return _fp8_block_grad_input(grad, weight, weight_scale, block_size)


@_fp8_block_grad_input_op.register_fake
def _(grad, weight, weight_scale, block_size):
    return grad.new_empty(grad.shape[0], weight.shape[1])


_register_grad_input(_fp8_block_grad_input_op, "Fp8BlockLinear")
_register(_fp8_block_linear_op, _fp8_block_grad_input_op, weight_args=(1, 2, 4), bias_index=3)


@_follows_autocast
def fp8_block_linear(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor],
                     block_size: int = 128, scale_fmt: Optional[str] = None,
                     layer="Fp8BlockLinear") -> Tensor:
    _check_input(x, weight, weight.shape[1], layer)
    _check_frozen(layer, weight, weight_scale)
    if _traced(x):
        return _fp8_block_linear_op(x, weight, weight_scale, bias, block_size, scale_fmt or "")
    impl = resolve("fp8_block", "linear", x.device)
    if _records_grad(x, bias):
        return _EagerLinear.apply(
            x, bias, lambda x2: _run_2d(impl, x2, weight.shape[0], weight, weight_scale, bias, block_size, scale_fmt),
            (_fp8_block_grad_input, _fp8_block_grad_input_op, (weight, weight_scale, block_size), "fp8_block"))
    return _run_2d(impl, x, weight.shape[0], weight, weight_scale, bias, block_size, scale_fmt)


# --------------------------------------------------------------------------- int8 dynamic
@_op("int8_dynamic_linear", "(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias) -> Tensor")
def _int8_dynamic_linear_op(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor]) -> Tensor:
    impl = resolve("int8_dynamic", "linear", x.device)
    return _run_2d(impl, x, weight.shape[0], weight, weight_scale, bias)


@_int8_dynamic_linear_op.register_fake
def _(x, weight, weight_scale, bias):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


def _int8_grad_input(grad: Tensor, weight: Tensor, weight_scale: Tensor) -> Tensor:
    """Both int8 formats (the same weight: int8 codes, a scale per output channel)."""
    return grad @ _dequantized("int8_weight_only", grad.dtype, weight, weight_scale)


@_op("int8_linear_grad_input", "(Tensor grad, Tensor weight, Tensor weight_scale) -> Tensor")
def _int8_grad_input_op(grad: Tensor, weight: Tensor, weight_scale: Tensor) -> Tensor:
    return _int8_grad_input(grad, weight, weight_scale)


@_int8_grad_input_op.register_fake
def _(grad, weight, weight_scale):
    return grad.new_empty(grad.shape[0], weight.shape[1])


_register_grad_input(_int8_grad_input_op, "Int8DynamicLinear / Int8WeightOnlyLinear")
_register(_int8_dynamic_linear_op, _int8_grad_input_op, weight_args=(1, 2), bias_index=3)


@_follows_autocast
def int8_dynamic_linear(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor],
                        layer="Int8DynamicLinear") -> Tensor:
    _check_input(x, weight, weight.shape[1], layer)
    _check_frozen(layer, weight, weight_scale)
    if _traced(x):
        return _int8_dynamic_linear_op(x, weight, weight_scale, bias)
    impl = resolve("int8_dynamic", "linear", x.device)
    if _records_grad(x, bias):
        return _EagerLinear.apply(x, bias, lambda x2: _run_2d(impl, x2, weight.shape[0], weight, weight_scale, bias),
                                  (_int8_grad_input, _int8_grad_input_op, (weight, weight_scale), "int8_weight_only"))
    return _run_2d(impl, x, weight.shape[0], weight, weight_scale, bias)


# --------------------------------------------------------------------------- int8 weight-only
@_op("int8_weight_only_linear", "(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias) -> Tensor")
def _int8_weight_only_linear_op(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor]) -> Tensor:
    impl = resolve("int8_weight_only", "linear", x.device)
    return _run_2d(impl, x, weight.shape[0], weight, weight_scale, bias)


@_int8_weight_only_linear_op.register_fake
def _(x, weight, weight_scale, bias):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


_register(_int8_weight_only_linear_op, _int8_grad_input_op, weight_args=(1, 2), bias_index=3)


@_follows_autocast
def int8_weight_only_linear(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor],
                            layer="Int8WeightOnlyLinear") -> Tensor:
    _check_input(x, weight, weight.shape[1], layer)
    _check_frozen(layer, weight, weight_scale)
    if _traced(x):
        return _int8_weight_only_linear_op(x, weight, weight_scale, bias)
    impl = resolve("int8_weight_only", "linear", x.device)
    if _records_grad(x, bias):
        return _EagerLinear.apply(x, bias, lambda x2: _run_2d(impl, x2, weight.shape[0], weight, weight_scale, bias),
                                  (_int8_grad_input, _int8_grad_input_op, (weight, weight_scale), "int8_weight_only"))
    return _run_2d(impl, x, weight.shape[0], weight, weight_scale, bias)


# --------------------------------------------------------------------------- int4 weight-only
@_op("int4_weight_only_linear", "(Tensor x, Tensor weight_packed, Tensor weight_scale, Tensor weight_zero_point, Tensor? bias, int group_size) -> Tensor")
def _int4_weight_only_linear_op(x: Tensor, weight_packed: Tensor, weight_scale: Tensor,
                                weight_zero_point: Tensor, bias: Optional[Tensor], group_size: int) -> Tensor:
    impl = resolve("int4_weight_only", "linear", x.device)
    return _run_2d(impl, x, weight_scale.shape[0], weight_packed, weight_scale, weight_zero_point, bias, group_size)


@_int4_weight_only_linear_op.register_fake
def _(x, weight_packed, weight_scale, weight_zero_point, bias, group_size):
    return x.new_empty(*x.shape[:-1], weight_scale.shape[0])


def _int4_grad_input(grad: Tensor, weight_packed: Tensor, weight_scale: Tensor, weight_zero_point: Tensor,
                     group_size: int) -> Tensor:
    return grad @ _dequantized("int4_weight_only", grad.dtype, weight_packed, weight_scale, weight_zero_point,
                               group_size)


@_op("int4_weight_only_linear_grad_input", "(Tensor grad, Tensor weight_packed, Tensor weight_scale, Tensor weight_zero_point, int group_size) -> Tensor")
def _int4_grad_input_op(grad: Tensor, weight_packed: Tensor, weight_scale: Tensor, weight_zero_point: Tensor,
                        group_size: int) -> Tensor:
    return _int4_grad_input(grad, weight_packed, weight_scale, weight_zero_point, group_size)


@_int4_grad_input_op.register_fake
def _(grad, weight_packed, weight_scale, weight_zero_point, group_size):
    return grad.new_empty(grad.shape[0], weight_packed.shape[1] * 2)


_register_grad_input(_int4_grad_input_op, "Int4WeightOnlyLinear")
_register(_int4_weight_only_linear_op, _int4_grad_input_op, weight_args=(1, 2, 3, 5), bias_index=4)


@_follows_autocast
def int4_weight_only_linear(x: Tensor, weight_packed: Tensor, weight_scale: Tensor, weight_zero_point: Tensor,
                            bias: Optional[Tensor], group_size: int, in_features: int,
                            layer="Int4WeightOnlyLinear") -> Tensor:
    _check_input(x, weight_packed, in_features, layer)
    _check_frozen(layer, weight_packed, weight_scale)
    if _traced(x):
        return _int4_weight_only_linear_op(x, weight_packed, weight_scale, weight_zero_point, bias, group_size)
    impl = resolve("int4_weight_only", "linear", x.device)
    n = weight_scale.shape[0]
    if _records_grad(x, bias):
        return _EagerLinear.apply(
            x, bias, lambda x2: _run_2d(impl, x2, n, weight_packed, weight_scale, weight_zero_point, bias, group_size),
            (_int4_grad_input, _int4_grad_input_op, (weight_packed, weight_scale, weight_zero_point, group_size),
             "int4_weight_only"))
    return _run_2d(impl, x, n, weight_packed, weight_scale, weight_zero_point, bias, group_size)


def _traced(x: Tensor) -> bool:
    """Compiling, or meta tensors: the custom op, whose fake implementation traces."""
    return torch.compiler.is_compiling() or x.is_meta


def _records_grad(x: Tensor, bias: Optional[Tensor]) -> bool:
    """Autograd records this call: for ``x``, or for a bias that requires grad (the kernels' outputs carry no
    autograd history of their own); or forward-mode AD or a functorch transform is active, which would
    otherwise differentiate or batch the CPU reference's arithmetic (a zero derivative through the activation's
    rounding) and reach a Triton kernel with tensors it cannot read."""
    if (x.requires_grad or (bias is not None and bias.requires_grad)) and torch.is_grad_enabled():
        return True
    return _forward_ad._current_level >= 0 or _transforms_active()


# A torch without the query: transforms go undetected, and the Function runs where grad is recorded.
_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


class _EagerLinear(torch.autograd.Function):
    """Eager autograd of a quantized linear: the same rule as the custom ops' (:func:`_register`) without their
    dispatch, which cost 120–280 µs of host time a call on the H100 host (torch 2.11; a training step of a
    4096² layer at M = 128 took 1.0 ms against bf16's 0.12; ``scripts/probe_backward_host.py``). ``forward_fn``
    runs the kernel on ``x``. ``grad_input`` is (function, its custom op, the weight's arguments after the
    gradient, the family whose ``dequantize_weight`` they take): the function maps a 2-D output gradient to the
    input's; the op does the same through the dispatcher, which functorch transforms (``torch.func.grad``)
    need — their backward hands over wrapped tensors, which have no storage for a Triton kernel to read, and
    the dispatcher unwraps them for an op. Forward-mode AD uses the family's dequantizer (:meth:`jvp`)."""

    @staticmethod
    def forward(x, bias, forward_fn, grad_input):
        y = forward_fn(x)
        if y._base is not None and _forward_ad._current_level >= 0:
            # forward AD lays the tangent out as the output's base: a view into the kernel's block (the output
            # with its split-K workspace behind it, kernels/workspace.py) failed an internal assert (call 9)
            y = y.clone()
        return y

    @staticmethod
    def setup_context(ctx, inputs, output):  # (a separate setup_context: torch.func.grad can then use it)
        x, bias, _, grad_input = inputs
        ctx.grad_input, ctx.x_shape = grad_input, x.shape
        ctx.y_shape, ctx.y_dtype = output.shape, output.dtype
        ctx.bias_dtype = bias.dtype if bias is not None and bias.requires_grad else None

    @staticmethod
    def vmap(info, in_dims, x, bias, forward_fn, grad_input):
        """``torch.func.vmap`` (per-sample gradients): every format is row-wise, its activation quantization
        included (per token), so the batch is only more rows of one call."""
        if in_dims[1] is not None:
            raise NotImplementedError("vmap over a quantized layer's bias (one bias per sample) is not supported")
        if in_dims[0] is None:
            return _EagerLinear.apply(x, bias, forward_fn, grad_input), None
        return _EagerLinear.apply(x.movedim(in_dims[0], 0), bias, forward_fn, grad_input), 0

    @staticmethod
    def jvp(ctx, x_tangent, bias_tangent, _forward_fn, _grad_input):
        """Forward-mode AD (torch.func.jvp, jacfwd, dual tensors): the backward's rule transposed, y's tangent
        is x's times W^T (the straight-through estimator where the forward quantizes x)."""
        *_, args, family = ctx.grad_input
        y_tangent = None
        if x_tangent is not None:
            # under torch.func.jvp the Triton dequantizer meets tensors without storage (round 36, call 8): the
            # reference's torch ops take them
            dequantize = _reference_dequantized if _transforms_active() else _dequantized
            y_tangent = x_tangent @ dequantize(family, x_tangent.dtype, *args).t()
        if bias_tangent is not None:
            bias_tangent = bias_tangent.to(ctx.y_dtype)
            y_tangent = bias_tangent.expand(ctx.y_shape) if y_tangent is None else y_tangent + bias_tangent
        return y_tangent

    @staticmethod
    def backward(ctx, grad):
        function, op, args, _ = ctx.grad_input
        if _transforms_active():
            function = op
        create_graph = torch.is_grad_enabled()
        with torch.no_grad():
            grad_x, grad_bias = _input_and_bias_grads(ctx, grad, lambda g: function(g, *args))
        if create_graph and grad_x is not None:  # as the custom ops: a second backward through x's raises
            grad_x = _FirstOrderOnly.apply(grad_x, grad)
        return grad_x, grad_bias, None, None


class _FirstOrderOnly(torch.autograd.Function):
    """``result`` (computed from ``upstream`` without a graph), linked to ``upstream`` by a node that raises."""

    generate_vmap_rule = True  # the forward is a clone: jacrev vmaps over the backward that applies this

    @staticmethod
    def forward(result, upstream):
        return result.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("second-order gradients through a quantized layer are not supported")

    @staticmethod
    def jvp(ctx, result_tangent, upstream_tangent):  # forward over reverse (torch.func.hessian)
        raise RuntimeError("second-order gradients through a quantized layer are not supported")
