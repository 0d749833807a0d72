"""Input statistics for calibrated rounding: the second moment E[x x^T] of each layer's inputs.

:func:`collect_input_moments` runs the user's calibration inputs through the *float* model once, in
eval mode (as it will be used), with a forward hook on every layer to calibrate, and accumulates
``sum x x^T`` over all tokens (every leading position of the layer's input counts as one sample),
divided by the count at the end. Layers
fed the very same tensor (query/key/value, gate/up) share the matrix product of each forward.

All layers' statistics come from one pass over the float model ("non-sequential" calibration: each
layer sees the float model's inputs, not those of a model whose earlier layers are already
quantized). On all-MiniLM-L6-v2 the sequential variant measured no better (notes/accuracy.md), and
one pass costs one forward per calibration input. The memory is ``4 K^2`` bytes per calibrated layer
(``K`` = in_features), kept on the device the activations are on.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn


def run_model(model: nn.Module, item: Any) -> Any:
    """Call ``model`` on one input: a Tensor (``model(x)``), a tuple/list (``model(*x)``) or a
    mapping (``model(**x)``, e.g. a tokenizer's output)."""
    if isinstance(item, Mapping):
        return model(**item)
    if isinstance(item, (tuple, list)):
        return model(*item)
    return model(item)


class _MomentHooks:
    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}
        self._last: tuple[torch.Tensor, int, torch.Tensor] | None = None

    def hook(self, name: str, in_features: int):
        def record(module, args, output):
            if not args or not isinstance(args[0], torch.Tensor):
                got = type(args[0]).__name__ if args else "nothing"
                raise ValueError(f"{name}: expected a tensor as the first input, got {got}")
            x = args[0]
            version = _version(x)
            if self._last is not None and self._last[0] is x and self._last[1] == version:
                product = self._last[2]
            else:
                x2 = x.detach().reshape(-1, in_features).float()
                product = x2.t() @ x2
                self._last = (x, version, product)
            rows = x.numel() // in_features
            if name in self.sums:
                self.sums[name] += product
            else:
                self.sums[name] = product.clone()
            self.counts[name] = self.counts.get(name, 0) + rows
        return record


def _version(x: torch.Tensor) -> int:
    try:
        return x._version
    except RuntimeError:  # inference tensors keep no version counter and cannot be modified in place
        return -1


def collect_input_moments(
    model: nn.Module,
    modules: Mapping[str, nn.Module],
    calibration: Iterable[Any],
    *,
    progress: bool = False,
    allow_unreached: bool = False,
) -> dict[str, torch.Tensor]:
    """{name: E[x x^T] float32 [K, K]} for each module in ``modules`` (name -> module with ``in_features``),
    from running every item of ``calibration`` through ``model`` (see :func:`run_model`).

    A module the inputs never reached is an error, unless ``allow_unreached`` (then it is left out of the
    result: an MoE expert no calibration token was routed to) and some other module was reached."""
    if isinstance(calibration, (torch.Tensor, Mapping, str, bytes)):
        calibration = [calibration]
    collector = _MomentHooks()
    handles = [module.register_forward_hook(collector.hook(name, module.in_features))
               for name, module in modules.items()]
    items: Iterable = calibration
    if progress:
        from tqdm.auto import tqdm

        items = tqdm(calibration, desc="calibrating", unit="input")
    seen = 0
    # inference behaviour (no dropout, BatchNorm's running statistics left alone); each submodule's own
    # mode comes back afterwards
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            for i, item in enumerate(items):
                seen += 1
                try:
                    run_model(model, item)
                except (RuntimeError, TypeError, ValueError, IndexError, KeyError) as exc:
                    raise ValueError(f"calibration input #{i} does not fit the model "
                                     f"({type(exc).__name__}: {exc})") from exc
                collector._last = None
    finally:
        for h in handles:
            h.remove()
        for module, training in modes:
            module.training = training
    if seen == 0:
        raise ValueError("calibration is empty: give at least one model input")
    missing = [name for name in modules if not collector.counts.get(name)]
    if missing and (not allow_unreached or len(missing) == len(modules)):
        raise ValueError(f"calibration inputs never reached {len(missing)} layer(s) to calibrate, e.g. "
                         f"{', '.join(missing[:3])}; give inputs that run through them or keep them unquantized")
    return {name: collector.sums[name] / collector.counts[name] for name in modules if name not in missing}
