"""save_quantized: a quantized model to safetensors shards + config.json that other tools read."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from quantkit.layers import QuantizedLinear
from quantkit.layers.experts import Experts

from .formats import CT_FORMAT, FORMATS, build_quantization_config, encode, layout_for_layer, recipe_of
from .model import CONFIG_NAME, checkpoint_key_map, module_key_map
from .storage import PlannedTensor, ShardWriter, atomic_output_dir


def model_config_dict(model: nn.Module) -> dict[str, Any]:
    """The fields of a transformers model's config (``{}`` for other models)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_json_string"):
        return {}
    data = json.loads(config.to_json_string(use_diff=False))
    if not data.get("architectures"):
        data["architectures"] = [type(model).__name__]
    return data


def _meta_twin(layer: QuantizedLinear) -> QuantizedLinear:
    """The same layer on ``meta`` (shapes and dtypes only), to plan its tensors without encoding them."""
    # int4 keeps its scales in the stand-in's dtype; fp8 and int8 in float32 whatever it is
    stand_in = nn.Linear(layer.in_features, layer.out_features, bias=False, device="meta",
                         dtype=layer.weight_scale.dtype)
    return recipe_of(layer).build(stand_in)


def quantized_state(model: nn.Module, fmt: str):
    """The file entries of ``model`` in ``fmt``: (planned tensors, writer, {module: recipe}, Linear names).

    A quantized layer's buffers are replaced by its layout's tensors, at the place of its first buffer,
    and encoded only when written (one layer's encoded copy at a time); tensors that share storage
    (tied weights) are written once, under their first name.
    """
    # a model whose MoE experts quantkit split (quantkit.layers.experts) is written under its checkpoints' names,
    # as transformers' save_pretrained writes it (Mixtral's experts under block_sparse_moe.experts.{e}.w1, ...)
    renamed = checkpoint_key_map(model) if any(isinstance(m, Experts) for m in model.modules()) else {}
    renamed_module = module_key_map(renamed)

    def stored(name: str) -> str:
        return renamed_module.get(name, name)

    layers = {name: m for name, m in model.named_modules() if isinstance(m, QuantizedLinear)}
    layouts = {name: layout_for_layer(m, fmt, name) for name, m in layers.items()}
    owner: dict[str, str] = {}
    for name, layer in layers.items():
        for buffer, _ in layer.named_buffers(recurse=False):
            if buffer != "bias":
                owner[f"{name}.{buffer}" if name else buffer] = name
    entries: list[tuple[str, object]] = []  # ("tensor", (key, tensor)) or ("layer", name)
    plan: list[PlannedTensor] = []
    emitted: set[str] = set()
    seen: set[tuple] = set()
    for key, tensor in model.state_dict().items():
        if tensor.is_meta:
            raise ValueError(f"cannot save {key}: it is on the meta device (load the weights first)")
        if key in owner:
            name = owner[key]
            if name not in emitted:
                emitted.add(name)
                entries.append(("layer", name))
                prefix = f"{stored(name)}." if name else ""
                plan.extend(PlannedTensor(prefix + s, t.dtype, tuple(t.shape))
                            for s, t in encode(layouts[name], _meta_twin(layers[name])).items())
            continue
        identity = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
                    tensor.stride(), tensor.dtype, tensor.device)
        if tensor.numel() and identity in seen:
            continue  # a tied weight: written once, retied on load
        seen.add(identity)
        key = renamed.get(key, key)
        entries.append(("tensor", (key, tensor)))
        plan.append(PlannedTensor(key, tensor.dtype, tuple(tensor.shape)))

    def write(writer: ShardWriter) -> None:
        for kind, item in entries:
            if kind == "tensor":
                writer.write(*item)
            else:
                prefix = f"{stored(item)}." if item else ""
                for suffix, t in encode(layouts[item], layers[item]).items():
                    writer.write(prefix + suffix, t)

    recipes = {stored(name): recipe_of(m) for name, m in layers.items()}
    linear = [stored(name) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    return plan, write, recipes, linear


def save_quantized(model: nn.Module, directory: str | os.PathLike, *, format: str = CT_FORMAT,
                   max_shard_size: int | str = "5GB", overwrite: bool = False,
                   config: dict[str, Any] | None = None) -> Path:
    """Write ``model`` (quantized with ``quantkit.quantize_``) to ``directory``.

    Args:
        format: ``"compressed-tensors"`` (default; what vLLM and transformers load: fp8-block ->
            float-quantized, int8-dynamic -> int-quantized, int4 / int8 weight-only -> pack-quantized)
            or ``"fp8"`` (the DeepSeek-V3 / Hugging Face layout, ``weight`` + ``weight_scale_inv``; every
            quantized layer must be fp8-block).
        max_shard_size: bytes or a size like ``"5GB"``; past it the tensors are split into shards with a
            ``model.safetensors.index.json``.
        overwrite: replace an existing ``directory`` (otherwise an error).
        config: the config.json fields to write; by default a transformers model's ``config``.

    The directory appears complete or not at all: everything is written to a temporary directory next
    to it, then renamed. Returns the directory.
    """
    if format not in FORMATS:
        raise ValueError(f"unknown checkpoint format {format!r}; choose one of {', '.join(FORMATS)}")
    plan, write, recipes, linear = quantized_state(model, format)
    qconfig = build_quantization_config(format, recipes, linear, class_target=True)
    data = dict(config) if config is not None else model_config_dict(model)
    data.pop("quantization_config", None)
    if qconfig is not None:
        data["quantization_config"] = qconfig
    directory = Path(directory)
    with atomic_output_dir(directory, overwrite) as tmp:
        writer = ShardWriter(tmp, plan, max_shard_size)
        try:
            write(writer)
            writer.close()
        finally:
            writer.abort()
        (tmp / CONFIG_NAME).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return directory
