"""load_quantized: a quantized checkpoint (ours or another tool's) straight into quantkit's layers.

The model is built with its parameters on ``meta`` (from ``config.json``'s ``architectures`` with
transformers, or the skeleton passed in), ``quantkit.quantize_`` swaps in the layers that the
checkpoint's ``quantization_config`` and tensors call for (still on ``meta``), the stored tensors are
translated into those layers' buffers, and ``load_state_dict(..., assign=True)`` adopts them: no weight
is ever allocated twice and nothing is dequantized.
"""
from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import torch
from torch import nn

from quantkit.api import quantize_
from quantkit.layers import QuantizedLinear
from quantkit.layers.experts import Experts
from quantkit.recipes import Recipe

from .formats import SchemeResolver, decode, recipe_of
from .model import CONFIG_NAME, NameMapper, build_model, checkpoint_key_map, read_config, split_experts_for_checkpoint
from .storage import Checkpoint, CheckpointError

logger = logging.getLogger("quantkit")


def _config_dtype(config: dict) -> torch.dtype | None:
    name = config.get("dtype") or config.get("torch_dtype")
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    return dtype if isinstance(dtype, torch.dtype) else None


def load_quantized(directory: str | os.PathLike, model: nn.Module | None = None, *,
                   device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> nn.Module:
    """Load a checkpoint directory into quantkit's quantized layers and return the model (in eval mode).

    Reads quantkit's own output and other tools' checkpoints: compressed-tensors (float-quantized fp8
    block, int-quantized W8A8, pack-quantized int4 / int8 weight-only), DeepSeek / Hugging Face
    ``"fp8"`` (``weight_scale_inv``, ``scale_fmt: "ue8m0"``), GPTQ and AWQ (4-bit, GEMM packing). A
    checkpoint without ``quantization_config`` loads as an ordinary high-precision model.

    Args:
        model: the skeleton to load into (any device, ``meta`` included; plain ``nn.Linear`` modules are
            quantized here as the checkpoint says). By default the transformers class named by
            ``config.json``'s ``architectures`` is built with its parameters on ``meta``.
        device: where the tensors go (default CPU).
        dtype: cast the high-precision floating tensors (embeddings, norms, biases) to this dtype;
            quantized codes and scales are never cast.

    Raises :class:`~quantkit.checkpoint.CheckpointError` (a ValueError) naming the file and tensor for
    missing, truncated or corrupt files, a weight without its scale, shapes or dtypes that do not
    match the model, missing tensors and an unknown ``quant_method``.
    """
    directory = Path(directory)
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda" and not torch.cuda.is_available():  # before reading anything, not torch's assert
        raise ValueError(f"load_quantized(device={str(device)!r}): torch {torch.__version__} sees no CUDA GPU here")
    ckpt = Checkpoint(directory)
    config = read_config(directory, required=model is None)
    where_config = str(directory / CONFIG_NAME)
    resolver = SchemeResolver.from_config(config.get("quantization_config"), where_config)
    if model is None:
        model = build_model(directory, config, _config_dtype(config))
    split_experts_for_checkpoint(model, ckpt.names())

    expected = model.state_dict(keep_vars=True)
    mapper = NameMapper(expected.keys(), getattr(model, "base_model_prefix", "") or "", ckpt.names(),
                        checkpoint_key_map(model) if _has_experts(model) else None)

    def locator(prefix: str):
        def where(suffix: str) -> str:
            name = f"{prefix}.{suffix}"
            file = ckpt.info(name).file if name in ckpt else directory
            return f"{file}: tensor {name}"
        return where

    # 1. which layout each Linear is stored in
    layouts = {}
    for name, module in model.named_modules():
        if not isinstance(module, (nn.Linear, QuantizedLinear)):
            continue
        prefix = mapper.module_to_ckpt(name, ("weight", "weight_packed", "qweight", "bias"))
        # quantization_config names modules as the model does; the tensors go by the checkpoint's names
        layout = resolver.layout_for(name, True, lambda s, p=prefix: ckpt.dtype(f"{p}.{s}"), locator(prefix))
        if isinstance(module, QuantizedLinear):
            have = recipe_of(module)
            if layout is None or layout.recipe != have:
                raise CheckpointError(f"{directory}: module {name} of the model is already {have}, but the checkpoint "
                                      f"stores it as {layout.recipe if layout else 'high precision'}")
        if layout is not None:
            layouts[name] = (layout, prefix)

    # 2. quantize the skeleton the way the checkpoint is stored
    by_recipe: dict[Recipe, set[str]] = {}
    for name, (layout, _) in layouts.items():
        module = model.get_submodule(name)
        if isinstance(module, QuantizedLinear):
            continue
        reason = layout.recipe.skip_reason(module)
        if reason:
            raise CheckpointError(f"{directory}: module {name} is stored as {layout.recipe} but {reason}")
        by_recipe.setdefault(layout.recipe, set()).add(name)
    for recipe, names in by_recipe.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # every module is checked above; nothing is skipped silently
            quantize_(model, recipe, filter_fn=lambda m, n, names=names: n in names)
        for name in names:
            if not isinstance(model.get_submodule(name), QuantizedLinear):
                raise CheckpointError(f"{directory}: module {name} could not be made {recipe} (see the warning above)")
    expected = model.state_dict(keep_vars=True)
    aliases: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(param), []).append(name)

    # 3. the checkpoint's tensors, translated into the model's names and buffers
    state: dict[str, torch.Tensor] = {}
    consumed: set[str] = set()
    for name, (layout, prefix) in layouts.items():
        layer = model.get_submodule(name)

        def read(suffix: str, prefix=prefix):
            key = f"{prefix}.{suffix}"
            if key not in ckpt:
                return None
            consumed.add(key)
            return ckpt.get(key, device)

        for buffer, tensor in decode(layout, layer, read, locator(prefix)).items():
            state[f"{name}.{buffer}"] = tensor
        consumed.update(f"{prefix}.{s}" for s in layout.suffixes())

    unexpected = []
    for key in ckpt.names():
        if key in consumed:
            continue
        target = mapper.to_model(key)
        if target not in expected:
            unexpected.append(key)
            continue
        info = ckpt.info(key)
        want = expected[target]
        where = f"{info.file}: tensor {key}"
        if tuple(info.shape) != tuple(want.shape):
            raise CheckpointError(f"{where}: shape {list(info.shape)} does not match the model's {target} "
                                  f"{list(want.shape)}")
        if info.dtype.is_floating_point != want.dtype.is_floating_point or (
                not info.dtype.is_floating_point and info.dtype != want.dtype):
            raise CheckpointError(f"{where}: dtype {info.dtype} does not match the model's {target} ({want.dtype})")
        tensor = ckpt.get(key, device)
        if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
            tensor = tensor.to(dtype)
        state[target] = tensor
    ckpt.close()

    buffers = {n for n, _ in model.named_buffers(remove_duplicate=False)}
    unexpected = [k for k in unexpected if mapper.to_model(k) not in buffers]  # e.g. non-persistent position_ids
    if unexpected:
        logger.warning("quantkit: %d tensors of %s are not part of the model and were ignored: %s%s", len(unexpected),
                       directory, ", ".join(unexpected[:5]), " ..." if len(unexpected) > 5 else "")

    model.load_state_dict(state, strict=False, assign=True)
    _retie(model, aliases, state)
    missing = sorted(k for k, v in model.state_dict(keep_vars=True).items() if v.is_meta)
    if missing:
        raise CheckpointError(f"{directory}: the checkpoint has no tensor for {missing[0]}"
                              f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}")
    if device.type != "cpu":
        model.to(device)
    return model.eval()


def _has_experts(model: nn.Module) -> bool:
    return any(isinstance(m, Experts) for m in model.modules())


def _retie(model: nn.Module, aliases: dict[int, list[str]], state: dict[str, torch.Tensor]) -> None:
    """Parameters the skeleton shares (tied embeddings) share the one tensor the checkpoint holds."""
    for names in aliases.values():
        if len(names) < 2:
            continue
        loaded = [n for n in names if n in state]
        if not loaded:
            continue
        source = model.get_parameter(loaded[0])
        for name in names:
            if name not in state:
                owner, _, attr = name.rpartition(".")
                setattr(model.get_submodule(owner) if owner else model, attr, source)
