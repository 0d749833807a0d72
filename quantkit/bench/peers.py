"""Peer implementations timed beside quantkit's recipes when they are installed: torchao ``quantize_``
configs and gemlite layers (the versions PERFORMANCE.md measured: torchao 0.18, gemlite 0.6): fp8 block-wise,
int8 dynamic, int8 weight-only and int4 weight-only from each where it has them.

Neither is a dependency. Each peer is built inside its own ``try``: a missing package or an API that
changed skips that peer with a note instead of stopping the run. Weight bytes are the format's
nominal size (codes only), since the peers keep their tensors in subclasses of their own.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn


@dataclass
class Peer:
    name: str
    forward: Callable[[torch.Tensor], torch.Tensor]
    nbytes: int
    fmt: str  # the quantkit recipe of the same weight format (the bench compares the two)


def _import(name: str):
    try:
        return importlib.import_module(name), ""
    except Exception as exc:  # noqa: BLE001 - ImportError or a broken install alike
        return None, f"{name} not importable ({exc.__class__.__name__}: {exc})"


def _linear(weight: torch.Tensor) -> nn.Linear:
    lin = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        lin.weight.copy_(weight)
    return lin


def _torchao_builders(weight: torch.Tensor) -> dict[str, tuple[Callable[[], nn.Module], int, str]]:
    from torchao.quantization import (Float8DynamicActivationFloat8WeightConfig, Int4WeightOnlyConfig,
                                      Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_)
    from torchao.quantization.granularity import PerBlock

    n, k = weight.shape

    def make(config_fn):
        def build():
            lin = _linear(weight)
            quantize_(lin, config_fn())
            return lin
        return build

    return {
        "torchao fp8 1x128/128x128": (make(lambda: Float8DynamicActivationFloat8WeightConfig(
            granularity=[PerBlock([1, 128]), PerBlock([128, 128])])), n * k, "fp8-block"),
        "torchao int8 dynamic": (make(Int8DynamicActivationInt8WeightConfig), n * k, "int8-dynamic"),
        "torchao int8 weight-only": (make(Int8WeightOnlyConfig), n * k, "int8-weight-only"),
        "torchao int4 g128 tinygemm": (make(lambda: Int4WeightOnlyConfig(
            group_size=128, int4_packing_format="tile_packed_to_4d")), n * k // 2, "int4-weight-only"),
    }


def _gemlite_int4(weight: torch.Tensor, group_size: int = 128) -> nn.Module:
    """gemlite's A16W4 layer holding the codes, scales and zero-points of quantkit's own min-max int4
    quantization (``reference.int4``), so that both layers multiply the same weights (PERFORMANCE.md's
    gemlite int4 column used min-max codes of its own)."""
    from gemlite.helper import A16W4_HQQ_INT

    from quantkit.reference.int4 import int4_qparams_minmax, quantize_int4_with_qparams

    scale, zero = int4_qparams_minmax(weight, group_size, False, weight.dtype)
    q = quantize_int4_with_qparams(weight, scale, zero, group_size)
    return A16W4_HQQ_INT(device=weight.device, dtype=weight.dtype).from_weights(q, scale, zero.to(weight.dtype))


def _gemlite_builders(weight: torch.Tensor) -> dict[str, tuple[Callable[[], nn.Module], int, str]]:
    from gemlite.helper import A8W8_fp8_dynamic, A8W8_int8_dynamic, A16W8_INT8

    n, k = weight.shape
    dev, dt = weight.device, weight.dtype
    return {
        "gemlite A8W8 fp8 block128": (lambda: A8W8_fp8_dynamic(device=dev, dtype=dt, block_quant=True)
                                      .from_linear(_linear(weight)), n * k, "fp8-block"),
        "gemlite A8W8 int8 dynamic": (lambda: A8W8_int8_dynamic(device=dev, dtype=dt).from_linear(_linear(weight)),
                                      n * k, "int8-dynamic"),
        "gemlite A16W8 int8": (lambda: A16W8_INT8(device=dev, dtype=dt).from_linear(_linear(weight)), n * k,
                               "int8-weight-only"),
        "gemlite A16W4 g128": (lambda: _gemlite_int4(weight), n * k // 2, "int4-weight-only"),
    }


def build_peers(weight: torch.Tensor, compile_too: bool = False) -> tuple[list[Peer], list[str]]:
    """Every peer that can be built for ``weight`` [N, K], and a note for each one that cannot.

    ``compile_too`` adds each torchao peer again under ``torch.compile(dynamic=True)`` (how torchao is
    meant to be used; PERFORMANCE.md's ``torchao-c`` columns)."""
    peers: list[Peer] = []
    notes: list[str] = []
    for package, builders_fn in (("torchao", _torchao_builders), ("gemlite", _gemlite_builders)):
        module, why = _import(package)
        if module is None:
            notes.append(f"skipped {package}: {why}")
            continue
        try:
            builders = builders_fn(weight)
        except Exception as exc:  # noqa: BLE001 - an API this code does not know
            notes.append(f"skipped {package}: {exc.__class__.__name__}: {exc}")
            continue
        for name, (build, nbytes, fmt) in builders.items():
            try:
                layer = build()
            except Exception as exc:  # noqa: BLE001
                notes.append(f"skipped {name}: {exc.__class__.__name__}: {str(exc)[:200]}")
                continue
            peers.append(Peer(name, layer, nbytes, fmt))
            if compile_too and package == "torchao":
                peers.append(Peer(name + " compiled", torch.compile(layer, dynamic=True), nbytes, fmt))
    return peers, notes
