"""The streaming checkpoint converter behind ``quantkit convert`` and ``scripts/convert_checkpoint.py``.

A Hugging Face model directory in, a quantized (or, with ``dequantize``, a high-precision) directory
out, one tensor at a time:

1. every input header is checked (missing / truncated / corrupt files, an index naming a missing
   shard) before anything is written;
2. a plan is made on the ``meta`` device: for each Linear weight, the layer its recipe builds and the
   tensors that layer is stored as, so every output shard's header is known up front;
3. tensors are streamed: read (``safe_open``, reopened every 64 MiB so mapped pages do not pile up),
   quantized on the GPU when there is one, written straight into their shard. Peak memory stays near
   one tensor and its quantized form, whatever the model's size.

Which tensors are Linear weights: the architecture named by ``config.json`` is built on ``meta`` with
transformers and its ``nn.Linear`` modules are taken; when that is impossible, a 2-D floating
``<module>.weight`` whose module is not named like an embedding or a norm (see ``looks_linear``).

Quantization uses the layers' own code (``quantkit.quantize_linear`` on an ``nn.Linear`` stand-in that
holds the real weight), so a converted checkpoint holds exactly what ``quantize_`` + ``save_quantized``
would have written. Everything goes to a temporary directory next to the output, renamed at the end:
a failure or Ctrl-C leaves no partial output, and the input is only ever read.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch
from torch import nn

from quantkit.api import quantize_linear
from quantkit.recipes import QuantizationPlan, Recipe, RecipeLike, load_plan, unmatched_patterns

from .formats import (
    CT_FORMAT,
    FORMATS,
    Layout,
    SchemeResolver,
    build_quantization_config,
    decode,
    encode,
    infer_shape,
    layout_for_layer,
    recipe_of,
)
from .model import CONFIG_NAME, NameMapper, describe_architecture, looks_linear, read_config
from .storage import (
    INDEX_NAME,
    Checkpoint,
    CheckpointError,
    PlannedTensor,
    ShardWriter,
    atomic_output_dir,
    check_output_dir,
)

logger = logging.getLogger("quantkit")

# Weight files in formats the converter does not read: never copied next to the converted shards.
_OTHER_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".safetensors")

QUANTIZE, REENCODE, REQUANTIZE, DEQUANTIZE = "quantize", "re-encode", "requantize", "dequantize"

# Tensors that belong to a quantized weight, by quant_method: one without its module's weight is an error
_AUXILIARY = {"compressed-tensors": ("weight_scale", "weight_zero_point", "weight_shape", "weight_g_idx"),
              "fp8": ("weight_scale_inv",), "gptq": ("qzeros", "scales", "g_idx"), "awq": ("qzeros", "scales")}


@dataclass
class _Unit:
    """One Linear whose stored tensors change: its inputs, what happens, and its planned outputs."""

    module: str  # as the checkpoint names it
    action: str
    src: Layout | None
    recipe: Recipe | None  # target recipe (None for DEQUANTIZE)
    out_layout: Layout | None
    shape: tuple[int, int]  # (out_features, in_features)
    inputs: list[str]
    dense_dtype: torch.dtype = torch.bfloat16  # of dequantized weights (DEQUANTIZE, REQUANTIZE)
    model_name: str = ""  # as the model names it (the names quantization_config speaks of)
    outputs: list[PlannedTensor] = field(default_factory=list)


@dataclass
class ConvertReport:
    output: Path
    quantized: dict[str, str] = field(default_factory=dict)  # module -> recipe
    dequantized: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # Linear module kept in high precision -> why
    tensors_in: int = 0
    tensors_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    shards: int = 1
    linear_source: str = ""  # "architecture <Class>" or "name heuristic"
    #: the Linear modules a quantization_config must list as ignored (model names)
    unquantized_linear: list[str] = field(default_factory=list)
    #: every Linear module of the input (model names: what --ignore / --override patterns match)
    linear: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = []
        if self.quantized:
            recipes = sorted(set(self.quantized.values()))
            parts.append(f"quantized {len(self.quantized)} Linear modules ({', '.join(recipes)})")
        if self.dequantized:
            parts.append(f"dequantized {len(self.dequantized)}")
        if self.kept:
            parts.append(f"kept {len(self.kept)} in high precision")
        mb = lambda n: f"{n / 1e6:.1f} MB"  # noqa: E731
        parts.append(f"{self.tensors_in} tensors {mb(self.bytes_in)} -> {self.tensors_out} tensors "
                     f"{mb(self.bytes_out)} in {self.shards} shard{'s' if self.shards > 1 else ''}")
        return f"{self.output}: " + "; ".join(parts)


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _meta_layer(recipe: Recipe, shape: tuple[int, int], dtype: torch.dtype):
    stand_in = nn.Linear(shape[1], shape[0], bias=False, device="meta", dtype=dtype)
    return recipe.build(stand_in)


def convert_checkpoint(
    input_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    recipe: RecipeLike | QuantizationPlan = None,
    *,
    ignore: Iterable[str] = (),
    overrides: Mapping[str, RecipeLike] | None = None,
    format: str = CT_FORMAT,
    dequantize: bool = False,
    dtype: torch.dtype = torch.bfloat16,
    max_shard_size: int | str = "5GB",
    overwrite: bool = False,
    device: torch.device | str | None = None,
    progress: bool = True,
    use_architecture: bool = True,
    reopen_bytes: int = 64 * 2**20,
) -> ConvertReport:
    """Convert the Hugging Face model directory ``input_dir`` into ``output_dir``.

    Args:
        recipe: what to quantize the Linear weights into (a name, a recipe file, a Recipe or a plan);
            required for a high-precision input. For an input that is already quantized it may be
            left out to change only the format (e.g. DeepSeek ``fp8`` -> compressed-tensors, lossless).
        ignore / overrides: module patterns kept in high precision / ``{pattern: recipe}``, as for
            ``quantize_``. A quantized input module that ends up ignored is dequantized.
        format: ``"compressed-tensors"`` or ``"fp8"`` (see :func:`~quantkit.checkpoint.save_quantized`).
        dequantize: turn every quantized Linear of the input (fp8 / int8 / int4, ours or another
            tool's) back into a ``dtype`` weight and drop ``quantization_config`` (``recipe`` unused).
        dtype: the dtype of dequantized weights (and of the high-precision weight a quantized input
            module is requantized from).
        device: where the arithmetic runs (default: CUDA when available).
        use_architecture: find the Linear modules by building the architecture with transformers
            (False: by the name heuristic only).
    """
    input_dir, output_dir = Path(input_dir), Path(output_dir)
    if format not in FORMATS:
        raise ValueError(f"unknown checkpoint format {format!r}; choose one of {', '.join(FORMATS)}")
    device = torch.device(device) if device is not None else _default_device()
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device} asked for, but torch sees no CUDA GPU")
    ckpt = Checkpoint(input_dir, reopen_bytes=reopen_bytes)
    config = read_config(input_dir)
    resolver = SchemeResolver.from_config(config.get("quantization_config"), str(input_dir / CONFIG_NAME))
    plan = None
    if not dequantize:
        if recipe is None and not resolver.quantized:
            raise ValueError(f"{input_dir} is not quantized: a recipe is needed (e.g. --recipe int4-weight-only)")
        # without a recipe, --ignore and --override still apply: to the stored recipes (see _plan)
        plan = load_plan(recipe).with_extra(ignore, overrides) if recipe is not None or ignore or overrides else None
    elif recipe is not None:
        raise ValueError("dequantize=True converts back to high precision: do not pass a recipe too")
    elif not resolver.quantized:  # a copy at the input's own dtype would ignore the dtype asked for
        raise ValueError(f"{input_dir} is not quantized (its config.json has no quantization_config): nothing to "
                         f"dequantize")
    check_output_dir(output_dir, overwrite, [input_dir])

    report = ConvertReport(output_dir)
    units = _plan(ckpt, config, input_dir, resolver, plan, format, dequantize, dtype, use_architecture,
                          report)
    given = [ignore] if isinstance(ignore, str) else list(ignore or ())
    unmatched = unmatched_patterns([*given, *(overrides or {})], report.linear)
    if unmatched:  # most likely a typo, or the checkpoint's name prefix where the model's name is meant
        logger.warning("quantkit: no Linear module of %s matches %s (given as --ignore / --override; patterns match "
                       "the model's module names, e.g. %s)", input_dir, ", ".join(map(repr, unmatched)),
                       report.linear[0] if report.linear else "none found")
    order: list[tuple[str, Any]] = []  # ("copy", name) | ("unit", unit), in input storage order
    unit_of: dict[str, _Unit] = {}
    for unit in units:
        for name in unit.inputs:
            unit_of[name] = unit
    started: set[str] = set()
    for name in ckpt.names():
        if name in unit_of:
            unit = unit_of[name]
            if unit.module not in started:
                started.add(unit.module)
                order.append(("unit", unit))
        else:
            order.append(("copy", name))
    planned: list[PlannedTensor] = []
    for kind, item in order:
        if kind == "unit":
            planned.extend(item.outputs)
        else:
            info = ckpt.info(item)
            planned.append(PlannedTensor(item, info.dtype, info.shape))

    modules = {u.model_name: u.out_layout.recipe for u in units if u.out_layout is not None}
    qconfig = None if dequantize else build_quantization_config(
        format, modules, report.unquantized_linear, class_target=report.linear_source.startswith("architecture"))
    new_config = dict(config)
    new_config.pop("quantization_config", None)
    if qconfig is not None:
        new_config["quantization_config"] = qconfig
    if dequantize:
        for key in ("dtype", "torch_dtype"):
            if key in new_config:
                new_config[key] = str(dtype).replace("torch.", "")

    bar_tensors = bar_bytes = None
    if progress:
        from tqdm.auto import tqdm

        bar_tensors = tqdm(total=len(ckpt.names()), desc="tensors", unit="tensor", position=0)
        bar_bytes = tqdm(total=ckpt.total_bytes, desc="bytes", unit="B", unit_scale=True, unit_divisor=1024,
                         position=1)
    try:
        with atomic_output_dir(output_dir, overwrite, [input_dir]) as tmp:
            writer = ShardWriter(tmp, planned, max_shard_size)
            try:
                for kind, item in order:
                    if kind == "copy":
                        writer.write(item, ckpt.get(item))
                        done = [item]
                    else:
                        for name, tensor in _run_unit(item, ckpt, device):
                            writer.write(name, tensor)
                        done = item.inputs
                    if bar_tensors is not None:
                        bar_tensors.update(len(done))
                        bar_bytes.update(sum(ckpt.info(n).nbytes for n in done))
                writer.close()
            finally:
                writer.abort()
                ckpt.close()
            _copy_other_files(input_dir, tmp, set(ckpt.files))
            (tmp / CONFIG_NAME).write_text(json.dumps(new_config, indent=2) + "\n")
            report.shards = len(writer.shard_names)
    finally:
        if bar_tensors is not None:
            bar_tensors.close()
            bar_bytes.close()
    report.tensors_in, report.bytes_in = len(ckpt.names()), ckpt.total_bytes
    report.tensors_out, report.bytes_out = len(planned), sum(p.nbytes for p in planned)
    return report


def _plan(ckpt: Checkpoint, config: dict, input_dir: Path, resolver: SchemeResolver, plan: QuantizationPlan | None,
          fmt: str, dequantize: bool, dtype: torch.dtype, use_architecture: bool,
          report: ConvertReport) -> list[_Unit]:
    arch = describe_architecture(input_dir, config) if use_architecture else None
    linear_names = arch.linear if arch is not None else None
    mapper = NameMapper(arch.tensors if arch else (), arch.prefix if arch else "", ckpt.names(),
                        arch.renamed if arch else None)
    report.linear_source = f"architecture {arch.name}" if arch is not None else "name heuristic"
    if linear_names is not None:  # with those without a tensor of their own (a tied lm_head)
        report.linear.extend(sorted(linear_names))

    modules: list[str] = []
    seen: set[str] = set()
    for name in ckpt.names():
        module, _, suffix = name.rpartition(".")
        if suffix in ("weight", "weight_packed", "qweight") and module and module not in seen:
            seen.add(module)
            modules.append(module)
    for name in ckpt.names():
        module, _, suffix = name.rpartition(".")
        if module not in seen and suffix in _AUXILIARY.get(resolver.method, ()):
            raise CheckpointError(f"{ckpt.info(name).file}: tensor {name}: a quantization tensor, but {module} has no "
                                  f"weight ({module}.weight, .weight_packed or .qweight is missing)")

    units: list[_Unit] = []
    for module in modules:
        def dtype_of(suffix: str, module=module):
            return ckpt.dtype(f"{module}.{suffix}")

        def where(suffix: str, module=module) -> str:
            name = f"{module}.{suffix}"
            return f"{ckpt.info(name).file if name in ckpt else input_dir}: tensor {name}"

        stored_quantized = (dtype_of("weight_packed") is not None or dtype_of("qweight") is not None
                            or dtype_of("weight") in (torch.float8_e4m3fn, torch.int8))
        model_name = mapper.to_model(f"{module}.weight").rpartition(".")[0] if arch is not None else module
        if linear_names is not None:
            is_linear = model_name in linear_names
        else:
            is_linear = looks_linear(module, ckpt)
        is_linear = is_linear or stored_quantized
        if is_linear and linear_names is None:
            report.linear.append(model_name)
        src = resolver.layout_for(model_name, is_linear, dtype_of, where)  # the config speaks of model names

        if src is None:
            if dequantize or not is_linear or dtype_of("weight") is None:
                continue
            recipe, why = plan.recipe_for(model_name) if plan is not None else (None, "no recipe")
            _check_calibration(recipe, module)
            info = ckpt.info(f"{module}.weight")
            shape = (info.shape[0], info.shape[1])
            if recipe is None:
                report.kept[module] = why
                continue
            stand_in = nn.Linear(shape[1], shape[0], bias=False, device="meta", dtype=info.dtype)
            reason = recipe.skip_reason(stand_in)
            if reason:
                logger.warning("quantkit: kept %s (%dx%d) in high precision: %s cannot take it: %s", module,
                               shape[0], shape[1], recipe.name, reason)
                report.kept[module] = f"{recipe.name} cannot take it: {reason}"
                continue
            layer = recipe.build(stand_in)
            unit = _Unit(module, QUANTIZE, None, recipe, layout_for_layer(layer, fmt, module), shape,
                         [f"{module}.weight"])
        else:
            inputs = [f"{module}.{s}" for s in src.suffixes() if f"{module}.{s}" in ckpt]

            def read_small(suffix: str, module=module):
                key = f"{module}.{suffix}"
                return ckpt.get(key) if key in ckpt and ckpt.info(key).nbytes <= 64 else None

            shape = infer_shape(src, lambda s, m=module: ckpt.info(f"{m}.{s}").shape if f"{m}.{s}" in ckpt else None,
                                read_small, where)
            src_layer = _meta_layer(src.recipe, shape, _scale_dtype(src, module, ckpt))
            reason = src.recipe.skip_reason(nn.Linear(shape[1], shape[0], bias=False, device="meta"))
            if reason:
                raise CheckpointError(f"{where(src.primary)}: stored as {src.recipe} but {reason}")
            if dequantize:
                unit = _Unit(module, DEQUANTIZE, src, None, None, shape, inputs)
            else:
                if plan is None:
                    recipe, why = src.recipe, ""
                else:  # a plan without a default recipe leaves a stored module in its own
                    own = plan if plan.default is not None else replace(plan, default=src.recipe)
                    recipe, why = own.recipe_for(model_name)
                if recipe is None:
                    report.kept[module] = why
                    unit = _Unit(module, DEQUANTIZE, src, None, None, shape, inputs)
                elif _same_format(recipe, src.recipe, shape):
                    unit = _Unit(module, REENCODE, src, recipe, layout_for_layer(src_layer, fmt, module), shape,
                                 inputs)
                else:
                    _check_calibration(recipe, module)
                    stand_in = nn.Linear(shape[1], shape[0], bias=False, device="meta", dtype=dtype)
                    reason = recipe.skip_reason(stand_in)
                    if reason:
                        raise CheckpointError(f"{where(src.primary)}: cannot requantize to {recipe}: {reason}")
                    unit = _Unit(module, REQUANTIZE, src, recipe,
                                 layout_for_layer(recipe.build(stand_in), fmt, module), shape, inputs)
        unit.dense_dtype = dtype
        unit.model_name = model_name
        units.append(unit)
        _plan_outputs(unit, ckpt)
        if unit.action == DEQUANTIZE:
            report.dequantized.append(module)
        else:
            report.quantized[module] = str(unit.recipe)
    quantized = {u.model_name for u in units if u.action != DEQUANTIZE}
    if arch is not None:
        stored_quantized = {name for u in units if u.src is not None for name in u.inputs}
        _check_against_architecture(ckpt, arch, mapper, stored_quantized)
        # every other Linear, tied ones without tensors of their own included (lm_head), is high precision
        report.unquantized_linear = sorted(arch.linear - quantized)
    else:
        kept = {u.model_name for u in units if u.action == DEQUANTIZE} | set(report.kept)
        report.unquantized_linear = sorted(kept - quantized)
    return units


def _check_against_architecture(ckpt: Checkpoint, arch, mapper: NameMapper, skip: set[str]) -> None:
    """Every high-precision tensor the model has must have the model's shape and kind (float / integer)."""
    for name in ckpt.names():
        if name in skip:
            continue
        expected = arch.tensors.get(mapper.to_model(name))
        if expected is None:
            continue
        info = ckpt.info(name)
        shape, dtype = expected
        where = f"{info.file}: tensor {name}"
        if tuple(info.shape) != shape:
            raise CheckpointError(f"{where}: shape {list(info.shape)} does not match the model ({arch.name} expects "
                                  f"{list(shape)})")
        if info.dtype.is_floating_point != dtype.is_floating_point or (
                not dtype.is_floating_point and info.dtype != dtype):
            raise CheckpointError(f"{where}: dtype {info.dtype} does not match the model ({arch.name} expects "
                                  f"{dtype})")


def _check_calibration(recipe: Recipe | None, module: str) -> None:
    if recipe is not None and getattr(recipe, "needs_calibration", False):
        raise ValueError(f"{module}: recipe {recipe} needs calibration data, which a checkpoint conversion does not "
                         f"have; quantize the loaded model with quantkit.quantize_(..., calibration=...) and save it "
                         f"with quantkit.save_quantized, or choose another rounding")


def _same_format(a: Recipe, b: Recipe, shape: tuple[int, int]) -> bool:
    """Whether two recipes store a layer the same way (rounding choices aside)."""
    return recipe_of(_meta_layer(a, shape, torch.bfloat16)) == recipe_of(_meta_layer(b, shape, torch.bfloat16))


def _scale_dtype(layout: Layout, module: str, ckpt: Checkpoint) -> torch.dtype:
    """The dtype the stand-in Linear needs for the layer's scales to come out as stored (int4 keeps its
    scales in the model dtype; the others in float32 whatever the stand-in)."""
    for suffix in ("weight_scale", "scales"):
        name = f"{module}.{suffix}"
        if layout.kind in ("ct-int4-packed", "gptq", "awq") and name in ckpt:
            return ckpt.info(name).dtype
    return torch.bfloat16


def _plan_outputs(unit: _Unit, ckpt: Checkpoint) -> None:
    prefix = unit.module
    if unit.action == DEQUANTIZE:
        unit.outputs = [PlannedTensor(f"{prefix}.weight", unit.dense_dtype, unit.shape)]
        return
    if unit.action == QUANTIZE:
        layer = _meta_layer(unit.recipe, unit.shape, ckpt.info(f"{prefix}.weight").dtype)
    elif unit.action == REENCODE:
        layer = _meta_layer(unit.recipe, unit.shape, _scale_dtype(unit.src, prefix, ckpt))
    else:
        layer = _meta_layer(unit.recipe, unit.shape, unit.dense_dtype)
    unit.outputs = [PlannedTensor(f"{prefix}.{s}", t.dtype, tuple(t.shape))
                    for s, t in encode(unit.out_layout, layer).items()]


def _decoded_layer(unit: _Unit, ckpt: Checkpoint, device: torch.device):
    """The quantized layer (with real buffers, on ``device``) a stored module decodes to."""
    layer = _meta_layer(unit.src.recipe, unit.shape, _scale_dtype(unit.src, unit.module, ckpt))

    def read(suffix: str):
        key = f"{unit.module}.{suffix}"
        return ckpt.get(key, device) if key in ckpt else None

    def where(suffix: str) -> str:
        key = f"{unit.module}.{suffix}"
        return f"{ckpt.info(key).file if key in ckpt else ckpt.directory}: tensor {key}"

    for buffer, tensor in decode(unit.src, layer, read, where).items():
        setattr(layer, buffer, tensor)
    return layer


def _run_unit(unit: _Unit, ckpt: Checkpoint, device: torch.device):
    """Yield (name, tensor) for the unit's outputs, in plan order."""
    if unit.action == QUANTIZE:
        weight = ckpt.get(f"{unit.module}.weight", device)
        stand_in = nn.Linear(unit.shape[1], unit.shape[0], bias=False, device="meta", dtype=weight.dtype)
        stand_in.weight = nn.Parameter(weight, requires_grad=False)
        layer = quantize_linear(stand_in, unit.recipe, device=device, name=unit.module)
    else:
        layer = _decoded_layer(unit, ckpt, device)
        if unit.action == DEQUANTIZE:
            yield f"{unit.module}.weight", layer.dequantize(unit.dense_dtype)
            return
        if unit.action == REQUANTIZE:
            stand_in = nn.Linear(unit.shape[1], unit.shape[0], bias=False, device="meta", dtype=unit.dense_dtype)
            stand_in.weight = nn.Parameter(layer.dequantize(unit.dense_dtype), requires_grad=False)
            layer = quantize_linear(stand_in, unit.recipe, device=device, name=unit.module)
    for suffix, tensor in encode(unit.out_layout, layer).items():
        yield f"{unit.module}.{suffix}", tensor


#: a weight file in a sub-folder up to this fraction of the checkpoint's size is a module of its own (a
#: sentence-transformers ``2_Dense`` head) and is copied as it is; a larger one is taken for a second copy of
#: the model (``original/consolidated.00.pth``) and left out
_SUBFOLDER_WEIGHTS_FRACTION = 1 / 8


def _copy_other_files(src: Path, dst: Path, converted: set[Path]) -> None:
    """Tokenizer files, generation config, README, sub-folders (sentence-transformers pooling, a dense head).
    Weight files the converter did not read are left out, with a warning, at the top level (another format
    of the same weights) and in sub-folders where they are larger than ``_SUBFOLDER_WEIGHTS_FRACTION`` of
    the checkpoint; smaller ones in sub-folders are copied as they are, unquantized, with a warning."""
    model_bytes = sum(path.stat().st_size for path in converted)
    for root, dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        dirs[:] = [d for d in dirs if not d.startswith(".")]  # .git, .cache: not part of the model
        for fname in files:
            path = Path(root) / fname
            if rel == Path(".") and fname in (CONFIG_NAME, INDEX_NAME):
                continue
            if fname.endswith(_OTHER_WEIGHTS):
                if path in converted:
                    continue
                size = path.stat().st_size
                if rel == Path(".") or size > model_bytes * _SUBFOLDER_WEIGHTS_FRACTION:
                    logger.warning("quantkit: not copying %s (%.1f MB: a weight file the converter does not read, "
                                   "taken for another copy of the model's weights)", path, size / 1e6)
                    continue
                logger.warning("quantkit: copying %s as it is, unquantized (%.1f MB: the weights of a module "
                               "outside the checkpoint, such as a sentence-transformers head)", path, size / 1e6)
            (dst / rel).mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dst / rel / fname)
