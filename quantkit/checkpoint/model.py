"""Model skeletons from ``config.json`` and the mapping between checkpoint names and module names."""
from __future__ import annotations

import contextlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import torch
from torch import nn

from .storage import Checkpoint, CheckpointError

logger = logging.getLogger("quantkit")

CONFIG_NAME = "config.json"


def read_config(directory: Path, required: bool = True) -> dict[str, Any]:
    path = Path(directory) / CONFIG_NAME
    if not path.is_file():
        if required:
            raise CheckpointError(f"{directory}: no {CONFIG_NAME} (not a Hugging Face model directory)")
        return {}
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: must hold a JSON object")
    return config


@contextlib.contextmanager
def params_on_meta() -> Iterator[None]:
    """Create every parameter on ``meta`` while buffers stay real.

    Parameters are replaced by the checkpoint's tensors anyway; buffers that are not saved
    (rotary ``inv_freq``, ``position_ids``) keep the values the model's constructor computes. Each
    parameter is moved to ``meta`` as it is registered, before any initializer touches it, so a
    skeleton of any size costs next to nothing.
    """
    original = nn.Module.register_parameter

    def register_parameter(self, name, param):
        if param is not None and not param.is_meta:
            param = type(param)(param.to("meta"), requires_grad=param.requires_grad)
        original(self, name, param)

    nn.Module.register_parameter = register_parameter
    try:
        yield
    finally:
        nn.Module.register_parameter = original


def build_model(directory: Path, config: dict[str, Any], dtype: torch.dtype | None = None) -> nn.Module:
    """The transformers model named by ``config.json``'s ``architectures``, parameters on ``meta``."""
    try:
        import transformers
    except ImportError:
        raise CheckpointError(f"{directory}: building the model from {CONFIG_NAME} needs transformers; install it "
                              f"or pass model= (an nn.Module, e.g. built on the meta device)") from None
    hf_config = transformers.AutoConfig.from_pretrained(str(directory))
    cls = None
    for name in config.get("architectures") or []:
        cls = getattr(transformers, name, None)
        if cls is not None:
            break
    kwargs = {"dtype": dtype} if dtype is not None else {}
    with params_on_meta():
        if cls is not None:
            model = cls._from_config(hf_config, **kwargs)
        else:
            model = transformers.AutoModel.from_config(hf_config, **kwargs)
    return model.eval()


@dataclass
class Architecture:
    """What the converter needs from a model class: its Linear module names and its tensors' shapes."""

    name: str
    linear: set[str]
    prefix: str
    tensors: dict[str, tuple[tuple[int, ...], torch.dtype]]
    #: {model key: checkpoint key} where the checkpoints name a tensor differently (see checkpoint_key_map)
    renamed: dict[str, str] = field(default_factory=dict)


def describe_architecture(directory: Path, config: dict[str, Any]) -> Architecture | None:
    """The architecture ``config.json`` names, built on ``meta``; None when it cannot be built (no
    transformers, a class transformers does not have) — the caller then falls back to names."""
    try:
        model = build_model(directory, config)
    except Exception as exc:  # noqa: BLE001 - any failure means: fall back to the name heuristic
        logger.warning("quantkit: cannot build the architecture of %s (%s: %s); deciding which tensors are "
                       "Linear weights by name", directory, type(exc).__name__, exc)
        return None
    from quantkit.layers.experts import split_fused_experts

    split_fused_experts(model)  # fused MoE experts: one Linear per expert projection, as checkpoints store them
    linear = {name for name, module in model.named_modules() if isinstance(module, nn.Linear)}
    tensors = {k: (tuple(v.shape), v.dtype) for k, v in model.state_dict(keep_vars=True).items()}
    return Architecture(type(model).__name__, linear, getattr(model, "base_model_prefix", "") or "", tensors,
                        checkpoint_key_map(model))


# Module names that are not Linear layers although they hold a 2-D ".weight" (embeddings, norms).
_NOT_LINEAR = re.compile(r"(^|[._])(embed\w*|\w*embeddings?|wte|wpe|\w*norm\w*|ln_?\w*|\w*_ln|layernorm\w*)$",
                         re.IGNORECASE)


def looks_linear(module: str, ckpt: Checkpoint) -> bool:
    """The fallback when the architecture is unknown: a 2-D floating ``<module>.weight`` whose name is
    not that of an embedding or a norm (see notes/checkpoint.md)."""
    name = f"{module}.weight"
    if name not in ckpt:
        return False
    info = ckpt.info(name)
    return len(info.shape) == 2 and info.dtype.is_floating_point and not _NOT_LINEAR.search(module.split(".")[-1])


def split_experts_for_checkpoint(model: nn.Module, stored_names: Iterable[str]) -> None:
    """Split the model's fused MoE experts (quantkit.layers.experts) wherever the checkpoint stores them one tensor per
    expert projection, as transformers saves them: each projection is then a module of its own, loaded (and, stored
    quantized, quantized) as any linear layer."""
    from quantkit.layers.experts import fused_experts_params, split_fused_experts

    stored = list(stored_names)
    fused = [name for name, module in model.named_modules() if name and fused_experts_params(module)]
    per_expert = [name for name in fused
                  if not any(key.endswith(f"{name.rpartition('.')[2]}.gate_up_proj") for key in stored)]
    if per_expert:
        split_fused_experts(model, only=per_expert)


def checkpoint_key_map(model: nn.Module) -> dict[str, str]:
    """{model key: checkpoint key} for the keys a transformers model renames in its checkpoints (Mixtral's
    ``mlp`` is ``block_sparse_moe`` on disk); keys stored under their own name are left out.

    transformers' ``save_pretrained`` reverts its load-time conversions; quantkit runs that reversal on one small
    tagged tensor per key and reads off the name each tag comes back under. Empty for other models, and when a
    conversion does not map keys one to one.
    """
    from quantkit.layers.experts import as_saved

    if getattr(model, "config", None) is None:
        return {}
    keys = list(model.state_dict(keep_vars=True))
    stored = as_saved(model, {key: torch.tensor([float(i)]) for i, key in enumerate(keys)})
    if stored is None:
        return {}
    out = {}
    for ckpt_key, tag in stored.items():
        if not isinstance(tag, torch.Tensor) or tag.numel() != 1:
            return {}
        key = keys[int(tag.item())]
        if ckpt_key != key:
            out[key] = ckpt_key
    return out


def module_key_map(key_map: dict[str, str]) -> dict[str, str]:
    """{model module: checkpoint module} from a key map (the module of ``a.b.weight`` is ``a.b``)."""
    out = {}
    for key, ckpt_key in key_map.items():
        module, _, leaf = key.rpartition(".")
        ckpt_module, _, ckpt_leaf = ckpt_key.rpartition(".")
        if leaf == ckpt_leaf and module and ckpt_module:
            out[module] = ckpt_module
    return out


class NameMapper:
    """Map between checkpoint tensor names and model names: a base-model prefix that differs (``bert.encoder...``
    in a checkpoint of ``BertModel``, or the other way round), and the keys in ``renamed`` ({model key:
    checkpoint key}, see :func:`checkpoint_key_map`)."""

    def __init__(self, model_names: Iterable[str], prefix: str, ckpt_names: Iterable[str],
                 renamed: dict[str, str] | None = None) -> None:
        self.model_names = set(model_names)
        self.prefix = prefix
        self.ckpt_names = set(ckpt_names)
        renamed = renamed or {}
        self._key_from_ckpt = {ckpt: key for key, ckpt in renamed.items()}
        self._module_to_ckpt = module_key_map(renamed)

    def _candidates(self, name: str) -> list[str]:
        out = [name]
        if self.prefix:
            p = self.prefix + "."
            out.append(name[len(p):] if name.startswith(p) else p + name)
        return out

    def to_model(self, ckpt_name: str) -> str:
        if ckpt_name in self._key_from_ckpt:
            return self._key_from_ckpt[ckpt_name]
        for cand in self._candidates(ckpt_name):
            if cand in self.model_names:
                return cand
        return ckpt_name

    def module_to_ckpt(self, module: str, suffixes: Iterable[str]) -> str:
        suffixes = tuple(suffixes)
        renamed = self._module_to_ckpt.get(module)
        for cand in ([renamed] if renamed else []) + self._candidates(module):
            if any(f"{cand}.{s}" in self.ckpt_names for s in suffixes):
                return cand
        return module
