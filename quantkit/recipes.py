"""Recipes: what to turn each nn.Linear into, and plans that say which recipe applies to which module.

A recipe is a frozen dataclass validated on construction and registered under a name; a
:class:`QuantizationPlan` adds an ignore list and per-module overrides. Recipes come as objects, as
registered names (``"int4-weight-only"``), as dicts (``{"type": "int4-weight-only", "group_size":
64}``) or as recipe files (TOML or JSON, see ``configs/``). Unknown names and fields are errors that
list the valid ones.

Module patterns (ignore lists and overrides) match a module's fully-qualified name:
``"lm_head"`` or ``"*.down_proj"`` are shell-style globs that match the whole name or any dotted
suffix of it; ``"re:<regex>"`` is a Python regex matched from the start of the name (as in
compressed-tensors' ``ignore``).
"""
from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterable, Mapping, Union

from torch import nn

from quantkit.layers import (
    Fp8BlockLinear,
    Int4WeightOnlyLinear,
    Int8DynamicLinear,
    Int8WeightOnlyLinear,
    QuantizedLinear,
)


class RecipeError(ValueError):
    """A recipe name, field, value or file that quantkit cannot use."""


@dataclass(frozen=True)
class Recipe:
    """Base of all recipes. Subclasses set ``name`` and implement ``build`` (and ``skip_reason``)."""

    name: ClassVar[str] = ""

    def skip_reason(self, linear: nn.Linear) -> str | None:
        """Why this recipe cannot take ``linear`` (None if it can)."""
        return None

    def build(self, linear: nn.Linear) -> QuantizedLinear:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.name, **dataclasses.asdict(self)}

    def __str__(self) -> str:
        fields = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(self).items())
        return f"{self.name}({fields})" if fields else self.name


@dataclass(frozen=True)
class Fp8Block(Recipe):
    """FP8 e4m3 weights in 128×128 blocks, activations quantized per token per 128 (DeepSeek-V3 style).

    ``scale_fmt="ue8m0"`` rounds every scale up to a power of two (DeepSeek-V3.1 checkpoints)."""

    name: ClassVar[str] = "fp8-block"
    block_size: int = 128
    scale_fmt: str | None = None

    def __post_init__(self):
        if type(self.block_size) is not int or self.block_size != 128:
            raise RecipeError(f"fp8-block: block_size must be 128 (the DeepSeek-V3 layout that kernels and "
                              f"checkpoints use), got {self.block_size!r}")
        if self.scale_fmt not in (None, "ue8m0"):
            raise RecipeError(f"fp8-block: scale_fmt must be null or 'ue8m0', got {self.scale_fmt!r}")

    def build(self, linear):
        return Fp8BlockLinear.from_linear(linear, self.block_size, self.scale_fmt)


@dataclass(frozen=True)
class Int8Dynamic(Recipe):
    """int8 weights per output channel, int8 activations per token at run time (W8A8)."""

    name: ClassVar[str] = "int8-dynamic"

    def build(self, linear):
        return Int8DynamicLinear.from_linear(linear)


@dataclass(frozen=True)
class Int8WeightOnly(Recipe):
    """int8 weights per output channel; activations stay in the model dtype (A16W8)."""

    name: ClassVar[str] = "int8-weight-only"

    def build(self, linear):
        return Int8WeightOnlyLinear.from_linear(linear)


INT4_GROUP_SIZES = (32, 64, 128, 256)


@dataclass(frozen=True)
class Int4WeightOnly(Recipe):
    """4-bit weights in groups of ``group_size`` along the input dimension, a scale and zero-point each.

    ``rounding`` chooses the scales, zero-points and codes (see :mod:`quantkit.rounding`):
    ``"search"`` (default) minimizes each group's error without data; ``"gptq"`` uses calibration
    inputs (``quantize_(..., calibration=...)``) for GPTQ error feedback; ``"minmax"`` is the plain
    min-max rounding."""

    name: ClassVar[str] = "int4-weight-only"
    group_size: int = 128
    symmetric: bool = False
    rounding: str = "search"

    def __post_init__(self):
        if type(self.group_size) is not int or self.group_size not in INT4_GROUP_SIZES:
            raise RecipeError(f"int4-weight-only: group_size must be one of {list(INT4_GROUP_SIZES)}, "
                              f"got {self.group_size!r}")
        if not isinstance(self.symmetric, bool):
            raise RecipeError(f"int4-weight-only: symmetric must be true or false, got {self.symmetric!r}")
        from quantkit.rounding import INT4_ROUNDINGS

        if self.rounding not in INT4_ROUNDINGS:
            raise RecipeError(f"int4-weight-only: rounding must be one of {list(INT4_ROUNDINGS)}, "
                              f"got {self.rounding!r}{_suggest(str(self.rounding), INT4_ROUNDINGS)}")

    @property
    def needs_calibration(self) -> bool:
        """True when ``build`` needs the layer's input statistics (``quantize_(..., calibration=...)``)."""
        from quantkit.rounding import CALIBRATED_ROUNDINGS

        return self.rounding in CALIBRATED_ROUNDINGS

    def skip_reason(self, linear):
        if linear.in_features % self.group_size:
            return f"in_features={linear.in_features} is not a multiple of group_size={self.group_size}"
        return None

    def build(self, linear, input_moment=None):
        """``input_moment``: E[x x^T] [K, K] of the layer's inputs, for calibrated rounding."""
        from quantkit.rounding import int4_quantizer

        if linear.weight.is_meta:  # shapes only, nothing to round
            return Int4WeightOnlyLinear.from_linear(linear, self.group_size, self.symmetric)
        try:
            quantizer = int4_quantizer(self.rounding, input_moment)
        except ValueError as exc:
            raise RecipeError(f"int4-weight-only: {exc}") from None
        return Int4WeightOnlyLinear.from_linear(linear, self.group_size, self.symmetric, quantizer=quantizer)


RECIPES: dict[str, type[Recipe]] = {cls.name: cls for cls in (Fp8Block, Int8Dynamic, Int8WeightOnly, Int4WeightOnly)}

#: what an override may map a pattern to in order to keep matching modules in high precision
SKIP = "skip"

RecipeLike = Union[Recipe, str, os.PathLike, Mapping[str, Any], None]


def _suggest(word: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def recipe_from_dict(spec: Mapping[str, Any], where: str = "recipe") -> Recipe | None:
    """``{"type": name, **fields}`` -> Recipe; ``{"type": "skip"}`` -> None (keep in high precision)."""
    spec = dict(spec)
    name = spec.pop("type", None)
    if name is None:
        raise RecipeError(f"{where}: missing 'type'; valid types: {', '.join(RECIPES)}")
    if name == SKIP:
        if spec:
            raise RecipeError(f"{where}: a 'skip' entry takes no fields, got {sorted(spec)}")
        return None
    cls = _recipe_class(name, where)
    valid = [f.name for f in dataclasses.fields(cls)]
    for key in spec:
        if key not in valid:
            raise RecipeError(f"{where}: unknown field {key!r} for recipe {name!r}{_suggest(key, valid)}; "
                              f"valid fields: {', '.join(valid) if valid else '(none)'}")
    try:
        return cls(**spec)
    except TypeError as exc:
        raise RecipeError(f"{where}: {exc}") from None


def _recipe_class(name: str, where: str) -> type[Recipe]:
    if name not in RECIPES:
        raise RecipeError(f"{where}: unknown recipe {name!r}{_suggest(str(name), RECIPES)}; valid recipes: "
                          f"{', '.join(RECIPES)} (or a path to a .toml/.json recipe file)")
    return RECIPES[name]


def unmatched_patterns(patterns: Iterable[str], names: Iterable[str]) -> list[str]:
    """The ``patterns`` (ignore / override syntax) that match none of ``names``: a typo such as
    ``"lm-head"`` would otherwise pass without a word and quantize the module it meant to keep."""
    names = list(names)
    return [p for p in patterns if not any(_match(p, n) for n in names)]


def _match(pattern: str, name: str) -> bool:
    if pattern.startswith("re:"):
        return re.match(pattern[3:], name) is not None
    return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, "*." + pattern)


@dataclass(frozen=True)
class QuantizationPlan:
    """A default recipe plus an ignore list and ordered overrides (first matching override wins)."""

    default: Recipe | None
    ignore: tuple[str, ...] = ()
    overrides: tuple[tuple[str, Recipe | None], ...] = field(default_factory=tuple)

    def __post_init__(self):
        for pattern in (*self.ignore, *(p for p, _ in self.overrides)):
            if not isinstance(pattern, str) or not pattern:
                raise RecipeError(f"module patterns must be non-empty strings, got {pattern!r}")
            if pattern.startswith("re:"):
                try:
                    re.compile(pattern[3:])
                except re.error as exc:
                    raise RecipeError(f"bad regex in module pattern {pattern!r}: {exc}") from None

    def recipe_for(self, name: str) -> tuple[Recipe | None, str]:
        """(recipe, why): recipe None means keep the module as it is."""
        for pattern in self.ignore:
            if _match(pattern, name):
                return None, f"ignored by pattern {pattern!r}"
        for pattern, recipe in self.overrides:
            if _match(pattern, name):
                return recipe, (f"override {pattern!r}" if recipe else f"skipped by override {pattern!r}")
        if self.default is None:
            return None, "no default recipe and no override matched"
        return self.default, "default recipe"

    def with_extra(self, ignore: Iterable[str] | None = (), overrides: Mapping[str, RecipeLike] | None = None
                   ) -> "QuantizationPlan":
        """This plan plus extra ignore patterns and overrides (the extra overrides are tried first)."""
        extra = tuple((pattern, _resolve_single(spec, f"override {pattern!r}")) for pattern, spec in
                      (overrides or {}).items())
        if ignore is None:
            ignore = ()
        elif isinstance(ignore, str):
            ignore = (ignore,)
        return QuantizationPlan(self.default, (*self.ignore, *ignore), (*extra, *self.overrides))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = self.default.to_dict() if self.default else {}
        if self.ignore:
            out["ignore"] = list(self.ignore)
        if self.overrides:
            out["override"] = [{"match": p, **(r.to_dict() if r else {"type": SKIP})} for p, r in self.overrides]
        return out


def _resolve_single(spec: RecipeLike, where: str) -> Recipe | None:
    if spec is None or isinstance(spec, Recipe):
        return spec
    if isinstance(spec, Mapping):
        return recipe_from_dict(spec, where)
    if isinstance(spec, str) and spec == SKIP:
        return None
    if isinstance(spec, str) and spec in RECIPES:
        return RECIPES[spec]()
    plan = load_plan(spec)
    if plan.ignore or plan.overrides:
        raise RecipeError(f"{where}: recipe file {spec} has ignore/override entries, which only a top-level "
                          f"recipe may have")
    return plan.default


def load_plan(spec: RecipeLike | QuantizationPlan) -> QuantizationPlan:
    """Turn any accepted recipe form into a :class:`QuantizationPlan`."""
    if isinstance(spec, QuantizationPlan):
        return spec
    if spec is None or isinstance(spec, Recipe):
        return QuantizationPlan(spec)
    if isinstance(spec, Mapping):
        return _plan_from_dict(spec, "recipe")
    if isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec)
        if isinstance(spec, str) and text in RECIPES:
            return QuantizationPlan(RECIPES[text]())
        path = Path(text)
        if path.suffix.lower() in (".toml", ".json") or path.exists():
            return load_recipe_file(path)
        _recipe_class(text, "recipe")  # raises with the list of valid names
    raise RecipeError(f"a recipe must be a Recipe, a registered name, a dict or a recipe file path, "
                      f"got {type(spec).__name__}")


def load_recipe_file(path: str | os.PathLike) -> QuantizationPlan:
    """Read a TOML or JSON recipe file (see ``configs/`` for the format)."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"recipe file {path} does not exist")
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(path.read_text())
        else:
            import tomllib  # Python >= 3.11

            data = tomllib.loads(path.read_text())
    except ModuleNotFoundError:
        raise RecipeError(f"{path}: reading TOML needs Python >= 3.11; use a .json recipe file") from None
    except ValueError as exc:  # json.JSONDecodeError and tomllib.TOMLDecodeError are ValueErrors
        raise RecipeError(f"{path}: not a valid {path.suffix[1:].upper() or 'TOML'} recipe file: {exc}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe file must hold a table/object at the top level")
    return _plan_from_dict(data, str(path))


_PLAN_KEYS = ("ignore", "override")


def _plan_from_dict(data: Mapping[str, Any], where: str) -> QuantizationPlan:
    data = dict(data)
    ignore = data.pop("ignore", [])
    if isinstance(ignore, str):
        ignore = [ignore]
    if not isinstance(ignore, list) or not all(isinstance(p, str) for p in ignore):
        raise RecipeError(f"{where}: 'ignore' must be a list of module patterns")
    overrides = []
    for i, entry in enumerate(data.pop("override", [])):
        where_i = f"{where}: override #{i + 1}"
        if not isinstance(entry, Mapping):
            raise RecipeError(f"{where_i}: must be a table with 'match' and 'type'")
        entry = dict(entry)
        patterns = entry.pop("match", None)
        if patterns is None:
            raise RecipeError(f"{where_i}: missing 'match' (a module pattern or a list of them)")
        recipe = recipe_from_dict(entry, where_i)
        for pattern in [patterns] if isinstance(patterns, str) else list(patterns):
            overrides.append((pattern, recipe))
    default = recipe_from_dict(data, where) if data else None
    return QuantizationPlan(default, tuple(ignore), tuple(overrides))


def recipe_names() -> list[str]:
    return list(RECIPES)
