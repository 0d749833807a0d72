"""quantize_: walk a model, pick a recipe per nn.Linear, swap in quantized layers, report what happened."""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import torch
from torch import nn

from quantkit.layers import QuantizedLinear
from quantkit.layers.experts import Expert, Experts, split_fused_experts
from quantkit.recipes import QuantizationPlan, Recipe, RecipeLike, load_plan, unmatched_patterns

QUANTIZED = "quantized"
SKIPPED = "skipped"
ALREADY = "already quantized"


@dataclass
class ModuleReport:
    name: str
    status: str  # QUANTIZED, SKIPPED or ALREADY
    recipe: str | None  # the recipe applied (or that was meant to be, for shape skips)
    reason: str
    shape: tuple[int, int]  # (out_features, in_features)
    bytes_before: int
    bytes_after: int
    #: for one projection of one expert of a mixture-of-experts block: the name of the block's experts module
    experts: str = ""


@dataclass
class QuantizeReport:
    """What ``quantize_`` did to every nn.Linear (and already-quantized layer) it found."""

    modules: list[ModuleReport] = field(default_factory=list)

    @property
    def quantized(self) -> list[ModuleReport]:
        return [m for m in self.modules if m.status == QUANTIZED]

    @property
    def skipped(self) -> list[ModuleReport]:
        return [m for m in self.modules if m.status != QUANTIZED]

    @property
    def bytes_before(self) -> int:
        """Bytes of the weights (and biases) of every module listed, before quantization."""
        return sum(m.bytes_before for m in self.modules)

    @property
    def bytes_after(self) -> int:
        return sum(m.bytes_after for m in self.modules)

    def to_dict(self) -> dict[str, Any]:
        return {
            "quantized": len(self.quantized),
            "skipped": len(self.skipped),
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "modules": [dataclasses.asdict(m) for m in self.modules],
        }

    def summary(self) -> str:
        ratio = self.bytes_after / self.bytes_before if self.bytes_before else 1.0
        return (f"quantized {len(self.quantized)} of {len(self.modules)} linear modules; linear weights "
                f"{_mib(self.bytes_before)} -> {_mib(self.bytes_after)} ({ratio:.2f}x)")

    def __str__(self) -> str:
        lines = [self.summary()]
        rows = _grouped_rows(self.modules)
        if rows:
            width = max(len(name) for name, _, _, _ in rows)
            for name, m, before, after in rows:
                what = f"{m.status}: {m.reason}" if m.status != QUANTIZED else \
                    f"{m.recipe} ({m.reason})" if m.reason else m.recipe
                lines.append(f"  {name:<{width}}  {m.shape[0]:>6}x{m.shape[1]:<6} "
                             f"{_mib(before):>10} -> {_mib(after):>10}  {what}")
        return "\n".join(lines)


def _grouped_rows(modules: list[ModuleReport]) -> list[tuple[str, ModuleReport, int, int]]:
    """(name, entry, bytes before, bytes after) per line: the projections of a block's experts that fared alike
    (same projection, shape, outcome and reason) on one line as ``experts.*.down_proj (128 experts)``."""
    rows: list[tuple[str, ModuleReport, int, int]] = []
    groups: dict[tuple, int] = {}
    counts: dict[int, int] = {}
    for m in modules:
        if not m.experts:
            rows.append((m.name, m, m.bytes_before, m.bytes_after))
            continue
        child = m.name.rpartition(".")[2]
        key = (m.experts, child, m.status, m.recipe, m.reason, m.shape)
        if key not in groups:
            groups[key] = len(rows)
            rows.append((f"{m.experts}.*.{child}", m, 0, 0))
        i = groups[key]
        name, first, before, after = rows[i]
        rows[i] = (name, first, before + m.bytes_before, after + m.bytes_after)
        counts[i] = counts.get(i, 0) + 1
    return [(f"{name} ({counts[i]} experts)" if i in counts else name, m, before, after)
            for i, (name, m, before, after) in enumerate(rows)]


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def _nbytes(module: nn.Module) -> int:
    # recurse: a parametrized weight (torch.nn.utils.parametrize) lives in a child module
    tensors = list(module.parameters()) + list(module.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


def _is_hf_conv1d(module: nn.Module) -> bool:
    """transformers' Conv1D (GPT-2 and kin): a linear layer with its weight stored as [in, out]."""
    return type(module).__name__ == "Conv1D" and type(module).__module__.startswith("transformers")


def _unsupported_linear(name: str, module: nn.Linear, parent: nn.Module | None) -> str | None:
    if _is_hf_conv1d(module):
        return "transformers' Conv1D (a linear layer with its weight stored as [in, out]) is not an nn.Linear"
    if isinstance(parent, nn.MultiheadAttention):
        return "inside nn.MultiheadAttention, which reads .weight directly instead of calling the module"
    if type(module).forward is not nn.Linear.forward:
        return f"{type(module).__name__} overrides nn.Linear.forward"
    if not module.weight.is_floating_point():
        return f"weight dtype {module.weight.dtype} is not floating point"
    return None


def quantize_(
    model: nn.Module,
    recipe: RecipeLike | QuantizationPlan,
    *,
    ignore: Iterable[str] | None = (),
    overrides: Mapping[str, RecipeLike] | None = None,
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
    device: torch.device | str | None = None,
    progress: bool = False,
    calibration: Iterable[Any] | None = None,
) -> QuantizeReport:
    """Replace, in place, every ``nn.Linear`` of ``model`` by the quantized layer its recipe names.

    Args:
        recipe: a :class:`~quantkit.recipes.Recipe` (``Int4WeightOnly(group_size=64)``), a registered
            name (``"fp8-block"``, ``"int8-dynamic"``, ``"int8-weight-only"``, ``"int4-weight-only"``),
            a dict, a path to a recipe file, or a :class:`~quantkit.recipes.QuantizationPlan`.
        ignore: module patterns to keep in high precision (``"lm_head"``, ``"*.gate"``, ``"re:..."``).
        overrides: ``{pattern: recipe}`` tried before the recipe's own overrides; map to ``"skip"`` or
            None to keep matching modules unquantized.
        filter_fn: ``filter_fn(module, name) -> bool``; modules for which it returns False are kept.
        device: quantize each module on this device (e.g. ``"cuda"`` for fast quantization of a CPU
            model); the quantized layers stay there.
        progress: show a tqdm progress bar.
        calibration: sample inputs for recipes that calibrate (``Int4WeightOnly(rounding="gptq")``):
            an iterable of model inputs, each a Tensor (``model(x)``), a tuple (``model(*x)``) or a
            dict (``model(**x)``, e.g. a tokenizer's output). They run once through the float model,
            with hooks recording each calibrated layer's input second moment, before any swap.

    Returns a :class:`QuantizeReport`. Modules a recipe cannot take (e.g. in_features not a multiple
    of the int4 group size) are kept as they are, with a warning naming them; already-quantized
    layers are left alone; a module registered under several names is one layer, decided (and
    counted in the report) by its first name, with a warning where the rules for another name
    differ; a model built on the ``meta`` device gets quantized layers with ``meta`` buffers of the
    right shapes and dtypes, ready for ``load_state_dict(..., assign=True)``.
    """
    if isinstance(model, nn.Linear):
        raise TypeError("quantize_ replaces submodules in place and cannot replace the model itself: wrap a bare "
                        "nn.Linear (nn.Sequential(linear)) or use quantkit.quantize_linear(linear, recipe)")
    plan = load_plan(recipe).with_extra(ignore, overrides)
    report = QuantizeReport()
    # Fused MoE experts (3-D parameters) become one linear module per expert projection, quantized like any other;
    # a block none of whose experts gets quantized is given its fused module back at the end.
    split, kept_fused = split_fused_experts(model)
    for name, (fused, _) in split.items():
        hooks = _hooks_on(fused)
        if hooks:
            warnings.warn(f"quantkit: {name} had {hooks}, which the module that now holds its experts one linear "
                          f"layer each does not carry", stacklevel=2)
    order = {name: i for i, (name, _) in enumerate(model.named_modules(remove_duplicate=False))}
    for name, why in kept_fused.items():
        module = model.get_submodule(name)
        nbytes = _nbytes(module)
        shape = next(tuple(p.shape[-2:]) for p in module.parameters() if p.dim() >= 3)
        warnings.warn(f"quantkit: kept {name} ({type(module).__name__}, fused experts) in high precision: {why}",
                      stacklevel=2)
        report.modules.append(ModuleReport(name, SKIPPED, None, why, shape, nbytes, nbytes))
    targets = _collect(model, plan, filter_fn, report)
    # The caller's own patterns (not a recipe file's, whose `ignore = ["lm_head"]` is meant for any model)
    # that match no linear module are most likely typos: say so rather than quantize what they meant to keep.
    given = [ignore] if isinstance(ignore, str) else list(ignore or ())
    given += list(overrides or {})
    unmatched = unmatched_patterns(given, [m.name for m in report.modules] + [t[0] for t in targets])
    if unmatched:
        warnings.warn(f"quantkit: no linear module of the model matches {', '.join(map(repr, unmatched))} (given as "
                      f"ignore / overrides): check the module names (print(model) lists them)", stacklevel=2)
    tied = _tied_weights(model, targets)
    for name, (others, kept) in tied.items():
        keeps = f", and {', '.join(kept)} keep{'s' if len(kept) == 1 else ''} the high-precision tensor" if kept else ""
        quantized_holders = [name] + [o.rpartition(".")[0] for o in others if o not in kept]
        warnings.warn(f"quantkit: {name}.weight is tied to {', '.join(others)} (the same tensor): quantizing {name} "
                      f"breaks the tie and gives it a quantized copy of its own{keeps}; ignore={quantized_holders} "
                      f"keeps them tied", stacklevel=2)
    calibrated = {name: linear for name, _, _, linear, recipe_obj in targets
                  if getattr(recipe_obj, "needs_calibration", False) and not linear.weight.is_meta}
    moments: dict[str, torch.Tensor] = {}
    if calibrated:
        if calibration is None:
            names = list(calibrated)
            raise ValueError(f"{plan.recipe_for(names[0])[0]} needs calibration inputs for {len(names)} layer(s) "
                             f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}): "
                             f"quantize_(model, recipe, calibration=[input, ...])")
        from quantkit.rounding import DATA_FREE_ROUNDING
        from quantkit.rounding.calibration import collect_input_moments

        moments = collect_input_moments(model, calibrated, calibration, progress=progress, allow_unreached=True)
        unreached = [name for name in calibrated if name not in moments]
        if unreached:
            warnings.warn(f"quantkit: the calibration inputs never reached {len(unreached)} of {len(calibrated)} layers "
                          f"to calibrate ({', '.join(unreached[:3])}{', ...' if len(unreached) > 3 else ''}; an MoE "
                          f"expert no token was routed to, say): they are rounded without data (rounding={DATA_FREE_ROUNDING!r}); "
                          f"give more varied inputs to calibrate them", stacklevel=2)

    iterator: Iterable = targets
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(targets, desc="quantizing", unit="module")
    replaced: dict[int, tuple[QuantizedLinear, str]] = {}
    for name, parent, child_name, linear, recipe_obj in iterator:
        if id(linear) in replaced:  # a module registered under several names: one layer, counted once
            new, first = replaced[id(linear)]
            setattr(parent, child_name, new)
            report.modules.append(ModuleReport(name, QUANTIZED, str(recipe_obj), f"the same module as {first!r}",
                                               _shape(linear), 0, 0))
            continue
        fallback = ""
        if name in calibrated and name not in moments:  # never reached by the calibration inputs
            recipe_obj = dataclasses.replace(recipe_obj, rounding=DATA_FREE_ROUNDING)
            fallback = f"no calibration input reached it: rounding={DATA_FREE_ROUNDING!r}"
        if name in moments:
            source = linear if device is None else _moved(linear, torch.device(device))
            with torch.no_grad():
                new = recipe_obj.build(source, input_moment=moments.pop(name))
            new.module_name = name
        else:
            new = quantize_linear(linear, recipe_obj, device=device, name=name)
        replaced[id(linear)] = (new, name)
        setattr(parent, child_name, new)
        hooks = _hooks_on(linear)
        if hooks:
            warnings.warn(f"quantkit: {name} had {hooks}, which its quantized layer does not carry; register them on "
                          f"model.get_submodule({name!r}) again if they are still needed", stacklevel=2)
        reason = "; ".join(filter(None, (f"weight was tied to {', '.join(tied[name][0])}" if name in tied else "",
                                         fallback)))
        report.modules.append(ModuleReport(name, QUANTIZED, str(recipe_obj), reason, _shape(linear),
                                           _nbytes(linear), _nbytes(new), _experts_of(name, parent)))
    for name, (fused, experts) in split.items():
        if not any(isinstance(m, QuantizedLinear) for m in experts.modules()):
            parent_name, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, attr, fused)
            continue
        # experts kept in high precision next to quantized ones get weights of their own, so that the fused
        # parameters their views point into (every expert's float weights) can be freed
        for linear in experts.modules():
            if isinstance(linear, nn.Linear) and not linear.weight.is_meta:
                linear.weight = nn.Parameter(linear.weight.detach().clone(), requires_grad=linear.weight.requires_grad)
    # the grouped experts operator reads each block's buffers stacked over its experts; stacked now, so that a
    # compiled forward (which cannot check them) finds them
    for module in model.modules():
        if isinstance(module, Experts):
            module.restack()
    report.modules.sort(key=lambda m: order.get(m.name, len(order)))
    return report


def _experts_of(name: str, parent: nn.Module) -> str:
    """The experts module's name when ``name`` is one projection of one expert ('' otherwise)."""
    return name.rsplit(".", 2)[0] if isinstance(parent, Expert) else ""


def _hooks_on(module: nn.Module) -> str:
    """What was attached to ``module`` itself that a replacement module does not inherit ('' if nothing)."""
    kinds = (("forward pre-hook", module._forward_pre_hooks), ("forward hook", module._forward_hooks),
             ("backward hook", module._backward_hooks), ("backward pre-hook", module._backward_pre_hooks))
    parts = [f"{len(hooks)} {kind}{'s' if len(hooks) > 1 else ''}" for kind, hooks in kinds if hooks]
    if "forward" in vars(module):  # accelerate's offload / device-map hooks wrap the instance's forward
        parts.append("a forward replaced on the instance")
    return " and ".join(parts)


def _shape(linear: nn.Module) -> tuple[int, int]:
    if _is_hf_conv1d(linear):
        return (linear.weight.shape[1], linear.weight.shape[0])
    return (linear.out_features, linear.in_features)


def _tied_weights(model: nn.Module, targets) -> dict[str, tuple[list[str], list[str]]]:
    """{name: (the other names of its weight, those of them not quantized here)} for the modules to
    quantize whose weight the model also holds elsewhere (tied embeddings): the quantized layer gets a
    copy of its own, the holders left unquantized keep the float tensor."""
    names: dict[int, list[str]] = {}
    for name, _, _, linear, _ in targets:
        names.setdefault(id(linear), []).append(name)
    names_quantized = {name for name, *_ in targets}
    holders: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        holders.setdefault(id(param), []).append(name)
    tied = {}
    for name, _, _, linear, _ in targets:
        mine = names[id(linear)]
        others = [p for p in holders.get(id(linear.weight), []) if p.rpartition(".")[0] not in mine]
        if others and name == mine[0]:
            tied[name] = (others, [p for p in others if p.rpartition(".")[0] not in names_quantized])
    return tied


def _collect(model, plan: QuantizationPlan, filter_fn, report: QuantizeReport):
    """List (name, parent, attribute, linear, recipe) for every module to quantize; record the rest."""
    targets = []
    # A module registered under several names is one module: its first name decides what becomes of it
    # (quantizing it under one name only would leave a float and a quantized copy), and it is counted once.
    # id(module) -> (first name, the recipe the rules give that name, the recipe applied: None if kept)
    first: dict[int, tuple[str, Recipe | None, Recipe | None]] = {}
    expert_warnings: dict[tuple[str, str], list[str]] = {}
    for parent_name, parent in model.named_modules(remove_duplicate=False):
        # _modules rather than named_children(): the latter hides a module registered twice.
        for child_name, child in list(parent._modules.items()):
            if child is None:
                continue
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if isinstance(child, QuantizedLinear):
                nbytes, reason = _nbytes(child), "already a quantized layer"
                if id(child) in first:
                    nbytes, reason = 0, f"{reason} (the same module as {first[id(child)][0]!r})"
                first.setdefault(id(child), (name, None, None))
                report.modules.append(ModuleReport(name, ALREADY, child.format_name, reason,
                                                   _shape(child), nbytes, nbytes))
                continue
            if not isinstance(child, nn.Linear) and not _is_hf_conv1d(child):
                continue
            excluded = filter_fn is not None and not filter_fn(child, name)
            planned = None if excluded else plan.recipe_for(name)[0]
            if id(child) in first:
                first_name, first_planned, applied = first[id(child)]
                if planned != first_planned:
                    done = f"quantized with {applied}" if applied else "kept in high precision"
                    warnings.warn(f"quantkit: {name!r} is the same module as {first_name!r}, which its first name "
                                  f"decides: {done}; the rules that match {name!r} do not apply to it", stacklevel=3)
                if applied is not None:
                    targets.append((name, parent, child_name, child, applied))
                else:
                    report.modules.append(ModuleReport(name, SKIPPED, None, f"the same module as {first_name!r}",
                                                       _shape(child), 0, 0))
                continue
            first[id(child)] = (name, planned, None)
            nbytes = _nbytes(child)

            def skip(reason: str, recipe: Recipe | None = None, warn: bool = False) -> None:
                experts = _experts_of(name, parent)
                report.modules.append(ModuleReport(name, SKIPPED, str(recipe) if recipe else None, reason,
                                                   _shape(child), nbytes, nbytes, experts))
                if warn and experts:  # one warning per experts module and reason, not one per expert
                    expert_warnings.setdefault((experts, reason), []).append(name)
                elif warn:
                    out_features, in_features = _shape(child)
                    warnings.warn(f"quantkit: kept {name} ({type(child).__name__} {out_features}x{in_features}) "
                                  f"in high precision: {reason}", stacklevel=4)

            if excluded:
                skip("excluded by filter_fn")
                continue
            recipe, why = plan.recipe_for(name)
            if recipe is None:
                skip(why)
                continue
            reason = _unsupported_linear(name, child, parent) or recipe.skip_reason(child)
            if reason:
                skip(f"{recipe.name} cannot take it: {reason}", recipe, warn=True)
                continue
            targets.append((name, parent, child_name, child, recipe))
            first[id(child)] = (name, planned, recipe)
    for (experts, reason), names in expert_warnings.items():
        warnings.warn(f"quantkit: kept {len(names)} expert projection{'s' if len(names) > 1 else ''} of {experts} "
                      f"({', '.join(n[len(experts) + 1:] for n in names[:3])}{', ...' if len(names) > 3 else ''}) in "
                      f"high precision: {reason}", stacklevel=3)
    return targets


def quantize_linear(linear: nn.Linear, recipe: RecipeLike, *, device=None, name: str = "") -> QuantizedLinear:
    """Quantize one ``nn.Linear`` with ``recipe`` and return the new layer (``linear`` is not modified)."""
    plan = load_plan(recipe)
    if plan.default is None:
        raise ValueError("quantize_linear needs a recipe")
    reason = plan.default.skip_reason(linear)
    if reason:
        raise ValueError(f"{name or 'linear'}: {plan.default.name} cannot take it: {reason}")
    source = linear
    if device is not None and not linear.weight.is_meta:
        source = _moved(linear, torch.device(device))
    with torch.no_grad():
        layer = plan.default.build(source)
    layer.module_name = name
    return layer


def _moved(linear: nn.Linear, device: torch.device) -> nn.Linear:
    """A shallow stand-in for ``linear`` with its tensors on ``device`` (the original is untouched)."""
    if linear.weight.device == device:
        return linear
    stand_in = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
    stand_in.weight = nn.Parameter(linear.weight.detach().to(device), requires_grad=False)
    if linear.bias is not None:
        stand_in.bias = nn.Parameter(linear.bias.detach().to(device), requires_grad=False)
    return stand_in
