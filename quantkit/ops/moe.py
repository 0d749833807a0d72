"""A mixture-of-experts block's quantized experts as one operator, ``quantkit::moe_experts``.

:class:`quantkit.layers.experts.Experts` holds each expert projection as a quantized linear layer, and, where all of
them share one format, the layers' buffers stacked over the experts (``[E, ...]``). This module computes the block's
experts from those stacks:

* on a CUDA GPU with the grouped kernels (``quantkit.kernels.moe``: two launches, no host synchronization), unless
  the per-expert layers measured faster at this size (:func:`loop_is_faster`) and no CUDA graph is being captured;
* elsewhere, and where the loop is faster, :func:`routed_loop` with one call of the format's ``linear`` (the
  Triton kernel or the reference that :mod:`quantkit.ops.dispatch` picks) per expert projection, which is what
  the layers themselves would run.

``quantkit::moe_experts`` is a ``torch.library`` operator with a fake implementation, so a quantized MoE model traces
under ``torch.compile(fullgraph=True)`` (the loop's host synchronization and the kernels' launches happen inside
the operator, out of the graph). As for the linear layers, eager calls skip the dispatcher. The operator has no
autograd rule: where autograd records, the layer runs its experts through the quantized layers one by one.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from quantkit.ops import dispatch
from quantkit.ops.linear import _FLOAT_DTYPES, _follows_autocast, _op, _traced

#: the families' ``linear`` arguments after x, from one expert's slice of the stacked buffers
_LINEAR_ARGS: dict[str, Callable] = {
    "int8-weight-only": lambda codes, scale, zero, group, scale_fmt: (codes, scale, None),
    "int8-dynamic": lambda codes, scale, zero, group, scale_fmt: (codes, scale, None),
    "int4-weight-only": lambda codes, scale, zero, group, scale_fmt: (codes, scale, zero, None, group),
    "fp8-block": lambda codes, scale, zero, group, scale_fmt: (codes, scale, None, 128, scale_fmt),
}


def routed_loop(x: Tensor, top_k_index: Tensor, top_k_weights: Tensor, num_experts: int,
                project: Callable[[int, int, Tensor], Tensor], act: Callable[[Tensor], Tensor]) -> Tensor:
    """The experts as transformers' eager loop computes them: per expert that tokens were routed to,
    ``down(act(gate(x)) * up(x)) * w``, added into the output in x's dtype, each token's contributions in the order
    of its experts. ``project(e, role, t)`` is expert e's projection ``role`` (0 gate, 1 up, 2 down) of ``t``. The
    slots are sorted by expert once, so the host learns the experts' token counts in one synchronization."""
    out = torch.zeros_like(x)
    top_k = top_k_index.shape[-1]
    flat = top_k_index.reshape(-1).long()  # routers may give int32 indices
    with torch.no_grad():
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=num_experts)[:num_experts].tolist()
    token = order // top_k
    rows_x = x[token]
    routing = top_k_weights.reshape(-1)[order]
    start = 0
    for index, count in enumerate(counts):
        if not count:
            continue
        rows = slice(start, start + count)
        start += count
        xe = rows_x[rows]
        h = act(project(index, 0, xe)) * project(index, 1, xe)
        y = project(index, 2, h) * routing[rows, None]
        out.index_add_(0, token[rows], y.to(out.dtype))
    return out


def loop_is_faster(slots: int, experts: int) -> bool:
    """Where the per-expert layers (tuned GEMMs, one launch per expert projection) beat the grouped kernels: many
    rows an expert. Measured on an H100 (BENCHMARKS.md rounds 37-38): Mixtral-8x7B's experts at 2048 tokens (512 rows
    an expert) 4.1 against 5.4 ms for int8, 4.5 against 5.9 for int4 (round 38, call 1, from graphs). With 128
    experts the loop's launches dominate (Qwen3-30B-A3B at 2048 tokens: 38 ms against 0.95)."""
    from quantkit.kernels.moe import rows_per_expert

    return rows_per_expert(slots, experts) >= 256


def _experts(x: Tensor, top_k_index: Tensor, top_k_weights: Tensor, fmt: str, gate: tuple, up: tuple, down: tuple,
             group_size: int, scale_fmt: Optional[str]) -> Tensor:
    """The implementation (eager, and inside the operator): x [T, H], the routing [T, k], the stacked buffers
    ``(codes, scale, zero-point or None)`` of each projection."""
    experts = gate[0].shape[0]
    if x.shape[0] == 0:
        return torch.zeros_like(x)
    if x.is_cuda and _grouped(x, fmt, top_k_index.shape[-1], experts):
        grouped = _grouped_forward()
        if torch._C._cuda_getDevice() == x.device.index:
            return grouped(x, top_k_index, top_k_weights, *gate, *up, *down, fmt, group_size, scale_fmt)
        # Triton launches on the current device's stream: a block on another GPU than the current one
        with torch.cuda.device(x.device):
            return grouped(x, top_k_index, top_k_weights, *gate, *up, *down, fmt, group_size, scale_fmt)
    linear = dispatch.resolve(fmt.replace("-", "_"), "linear", x.device)
    arguments = _LINEAR_ARGS[fmt]
    roles = (gate, up, down)

    def project(e: int, role: int, t: Tensor) -> Tensor:
        codes, scale, zero = roles[role]
        return linear(t, *arguments(codes[e], scale[e], None if zero is None else zero[e], group_size, scale_fmt))

    return routed_loop(x, top_k_index, top_k_weights, experts, project, F.silu)


@functools.lru_cache(maxsize=None)
def _grouped_forward() -> Callable:
    """The grouped kernels' entry under launch plans (quantkit.kernels.plan): from a key's third call on, an eager
    call replays the recorded allocations and launches (x and the routing at their new addresses). At 1 token the
    Python that derives the launches cost 170-490 µs of host time a block against 36-50 µs of GPU time (round 38)."""
    from quantkit.kernels.moe import experts_forward_flat
    from quantkit.kernels.plan import planned

    return planned(experts_forward_flat, inputs=3)


def _grouped(x: Tensor, fmt: str, top_k: int, experts: int) -> bool:
    if dispatch._forced_backend() == "reference":
        return False
    if not dispatch.grouped_moe_available(x.device, fmt.replace("-", "_")):
        return False
    if torch.cuda.is_current_stream_capturing():
        return True  # the loop synchronizes with the host; the grouped kernels do not
    return not loop_is_faster(x.shape[0] * top_k, experts)


@_op("moe_experts", "(Tensor x, Tensor top_k_index, Tensor top_k_weights, Tensor gate_codes, Tensor gate_scale, "
                    "Tensor? gate_zero_point, Tensor up_codes, Tensor up_scale, Tensor? up_zero_point, "
                    "Tensor down_codes, Tensor down_scale, Tensor? down_zero_point, str fmt, int group_size, "
                    "str scale_fmt) -> Tensor")
def _moe_experts_op(x, top_k_index, top_k_weights, gate_codes, gate_scale, gate_zero_point, up_codes, up_scale,
                    up_zero_point, down_codes, down_scale, down_zero_point, fmt, group_size, scale_fmt):
    return _experts(x, top_k_index, top_k_weights, fmt, (gate_codes, gate_scale, gate_zero_point),
                    (up_codes, up_scale, up_zero_point), (down_codes, down_scale, down_zero_point), group_size,
                    scale_fmt or None)


@_moe_experts_op.register_fake
def _(x, top_k_index, top_k_weights, *_):
    return x.new_empty(x.shape)


def _check_inputs(x: Tensor, top_k_index: Tensor, top_k_weights: Tensor, codes: Tensor, fmt: str, label: str) -> None:
    """What the layers' own calls would have checked (the grouped kernels read the stacks by x's sizes): x's last
    dimension and dtype, routing of x's leading shape, one device."""
    hidden = codes.shape[-1] * (2 if fmt == "int4-weight-only" else 1)  # int4: two codes a byte
    if x.dim() == 0 or x.shape[-1] != hidden:
        raise ValueError(f"{label}: expected hidden states with last dimension {hidden}, got shape {tuple(x.shape)}")
    if x.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{label}: hidden states must be bfloat16, float16 or float32, got {x.dtype}")
    if top_k_index.shape != top_k_weights.shape or top_k_index.shape[:-1] != x.shape[:-1]:
        raise ValueError(f"{label}: top_k_index {tuple(top_k_index.shape)} and top_k_weights "
                         f"{tuple(top_k_weights.shape)} must both be [..., k] over hidden states {tuple(x.shape)}")
    if top_k_index.is_floating_point():
        raise TypeError(f"{label}: top_k_index must hold integer expert indices, got {top_k_index.dtype}")
    if not (x.device == codes.device == top_k_index.device == top_k_weights.device) and not x.is_meta:
        raise ValueError(f"{label}: hidden states on {x.device}, routing on {top_k_index.device} / "
                         f"{top_k_weights.device} and the quantized experts on {codes.device}; move them to one "
                         f"device")


@_follows_autocast
def moe_experts(x: Tensor, top_k_index: Tensor, top_k_weights: Tensor, fmt: str, gate: tuple, up: tuple,
                down: tuple, group_size: int = 0, scale_fmt: Optional[str] = None, label: str = "experts") -> Tensor:
    """A block's quantized experts on ``x`` [..., H] (inference: no autograd), routed by ``top_k_index`` /
    ``top_k_weights`` [..., k]; ``gate`` / ``up`` / ``down`` are the stacked buffers ``(codes, scale, zero-point or
    None)`` of format ``fmt`` (``group_size``: int4's group; ``scale_fmt``: fp8-block's activation scales). Returns
    [..., H] in x's dtype (under autocast, x is cast to autocast's dtype first, as ``nn.Linear`` would see it).
    ``label`` names the block in errors."""
    _check_inputs(x, top_k_index, top_k_weights, gate[0], fmt, label)
    shape = x.shape
    if x.dim() != 2:
        x = x.reshape(-1, shape[-1])
        top_k_index = top_k_index.reshape(x.shape[0], -1)
        top_k_weights = top_k_weights.reshape(x.shape[0], -1)
    if _traced(x):
        y = _moe_experts_op(x, top_k_index, top_k_weights, *gate, *up, *down, fmt, group_size, scale_fmt or "")
    else:
        y = _experts(x, top_k_index, top_k_weights, fmt, gate, up, down, group_size, scale_fmt)
    return y.reshape(shape)
