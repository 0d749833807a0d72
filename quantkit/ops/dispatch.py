"""Choose, per kernel family and device, between the Triton kernels and the PyTorch reference.

A family ``F`` uses ``quantkit.kernels.F`` when all of these hold: the tensor is on a CUDA device,
Triton imports, the device's compute capability is at least the module's ``MIN_CAPABILITY``, and the
module defines the function asked for. Otherwise the reference in ``quantkit.reference`` runs.

``QUANTKIT_BACKEND=reference`` forces the reference everywhere (useful to compare both paths on one
GPU); ``QUANTKIT_BACKEND=triton`` makes a missing kernel an error instead of a fallback.

The first choice per (family, function, device) is logged once on the ``quantkit`` logger, and kept in
:func:`backend_report` so tools like ``quantkit demo`` can say which path ran.
"""
from __future__ import annotations

import functools
import importlib
import logging
import os
from types import ModuleType
from typing import Callable

import torch

logger = logging.getLogger("quantkit")

_REPORTED: dict[tuple[str, str], tuple[str, str]] = {}


def _forced_backend() -> str:
    value = os.environ.get("QUANTKIT_BACKEND", "auto").strip().lower()
    if value not in ("auto", "reference", "triton"):
        raise ValueError(f"QUANTKIT_BACKEND must be auto, reference or triton, got {value!r}")
    return value


@functools.lru_cache(maxsize=None)
def _kernel_module(family: str) -> tuple[ModuleType | None, str]:
    try:
        import triton  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install
        return None, f"triton is not importable ({exc.__class__.__name__}: {exc})"
    try:
        return importlib.import_module(f"quantkit.kernels.{family}"), ""
    except ModuleNotFoundError as exc:
        if exc.name == f"quantkit.kernels.{family}":
            return None, f"no Triton kernels for {family} in this version"
        raise


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def _why_not_triton(family: str, device: torch.device, function: str) -> tuple[ModuleType | None, str]:
    if device.type != "cuda":
        return None, f"tensors are on {device.type}"
    module, reason = _kernel_module(family)
    if module is None:
        return None, reason
    need = getattr(module, "MIN_CAPABILITY", (8, 0))
    have = _capability(device.index if device.index is not None else torch.cuda.current_device())
    if have < need:
        return None, f"compute capability sm_{have[0]}{have[1]} < sm_{need[0]}{need[1]}"
    if not hasattr(module, function):
        return None, f"quantkit.kernels.{family} has no {function}()"
    return module, ""


_RESOLVED: dict[tuple[str, str, torch.device], Callable] = {}


def resolve(family: str, function: str, device: torch.device) -> Callable:
    """Return the Triton implementation of ``family.function`` for ``device``, or the reference's.

    Decided once per (family, function, device) and memoized: this runs on every forward, where a
    few microseconds of host time per call are what a decode step is short of. So
    ``QUANTKIT_BACKEND`` is read when a family first runs on a device; set it before that."""
    impl = _RESOLVED.get((family, function, device))
    if impl is None:
        impl = _RESOLVED[(family, function, device)] = _resolve(family, function, device)
    return impl


def _resolve(family: str, function: str, device: torch.device) -> Callable:
    forced = _forced_backend()
    module, reason = (None, "QUANTKIT_BACKEND=reference") if forced == "reference" else \
        _why_not_triton(family, device, function)
    if module is not None:
        _report(family, function, device, "triton", f"quantkit.kernels.{family}.{function}")
        if function == "linear":  # the per-forward entry point: replay its launches (kernels/plan.py)
            from quantkit.kernels.plan import planned

            return _on_device(planned(module.linear), device)
        return _on_device(getattr(module, function), device)
    if forced == "triton":
        raise RuntimeError(f"QUANTKIT_BACKEND=triton but {family}.{function} cannot use Triton: {reason}")
    _report(family, function, device, "reference", reason)
    return reference_function(family, function)


def reference_function(family: str, function: str) -> Callable:
    """The PyTorch reference of ``family.function``, whatever the device."""
    reference = importlib.import_module("quantkit.reference")
    return getattr(reference, _REFERENCE_NAMES[(family, function)])


def _on_device(fn: Callable, device: torch.device) -> Callable:
    """``fn`` run with ``device`` as the current CUDA device. Triton launches a kernel on the current
    device's stream, whatever device its tensors are on, and so do launch plans (kernels/plan.py): a
    layer on cuda:1 called while cuda:0 is current (a model spread over GPUs, whose layers do not set the
    device) would run on the wrong GPU and stream, unordered with the work that made x (an illegal memory
    access without peer access, a race with it). Where ``device`` is already current, one device query
    (torch's C call: ``torch.cuda.current_device()`` took 0.8 µs of host time a call on an H100 host)."""
    index = device.index
    if index is None:  # (tensors always name their device's index)
        return fn

    @functools.wraps(fn)
    def on_device(*args, **kwargs):
        if torch._C._cuda_getDevice() == index:
            return fn(*args, **kwargs)
        with torch.cuda.device(index):
            return fn(*args, **kwargs)

    return on_device


def _report(family: str, function: str, device: torch.device, backend: str, detail: str) -> None:
    key = (f"{family}.{function}", str(device))
    if key in _REPORTED:
        return
    _REPORTED[key] = (backend, detail)
    # Only a slow forward deserves a warning; quantizing weights with torch ops on a GPU is fast.
    if backend == "reference" and device.type == "cuda" and function == "linear":
        logger.warning("quantkit: %s on %s runs the PyTorch reference (%s): correct but slow", family,
                       device, detail)
    else:
        logger.info("quantkit: %s.%s on %s runs %s (%s)", family, function, device, backend, detail)


def backend_report() -> dict[tuple[str, str], tuple[str, str]]:
    """{("family.function", device): (backend, detail)} for everything that has run so far."""
    return dict(_REPORTED)


# (family, function) -> name of the reference function with the same signature.
_REFERENCE_NAMES = {
    ("fp8_block", "linear"): "fp8_block_linear",
    ("fp8_block", "quantize_weight"): "quantize_weight_fp8_block",
    ("fp8_block", "dequantize_weight"): "dequantize_weight_fp8_block",
    ("fp8_block", "quantize_act"): "quantize_act_fp8_group",
    ("fp8_block", "gemm"): "fp8_block_gemm",
    ("int8_dynamic", "linear"): "int8_dynamic_linear",
    ("int8_dynamic", "quantize_weight"): "quantize_weight_int8_per_channel",
    ("int8_dynamic", "quantize_act"): "quantize_act_int8_per_token",
    ("int8_dynamic", "gemm"): "int8_scaled_gemm",
    ("int8_weight_only", "linear"): "int8_weight_only_linear",
    ("int8_weight_only", "quantize_weight"): "quantize_weight_int8_per_channel",
    ("int8_weight_only", "dequantize_weight"): "dequantize_weight_int8",
    ("int4_weight_only", "linear"): "int4_weight_only_linear",
    ("int4_weight_only", "quantize_weight"): "quantize_weight_int4",
    ("int4_weight_only", "dequantize_weight"): "dequantize_weight_int4",
}


@functools.lru_cache(maxsize=None)
def _grouped_moe(index: int, family: str) -> bool:
    device = torch.device("cuda", index)
    module, reason = _why_not_triton("moe", device, "experts_forward")
    if module is not None:  # and what the format's own kernels need (fp8-block's e4m3: sm_89)
        module, reason = _why_not_triton(family, device, "linear")
    _report("moe", "experts", device, "triton" if module is not None else "reference",
            "quantkit.kernels.moe.experts_forward" if module is not None else reason)
    return module is not None


def grouped_moe_available(device: torch.device, family: str) -> bool:
    """Whether quantkit.kernels.moe's grouped expert kernels run on ``device`` for experts of ``family``
    (``"fp8_block"``, ...): a CUDA GPU where Triton and both kernel modules run. Split MoE experts otherwise run one
    layer call per expert projection."""
    if device.type != "cuda":
        return False
    return _grouped_moe(device.index if device.index is not None else torch.cuda.current_device(), family)
