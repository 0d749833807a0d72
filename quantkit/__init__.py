"""quantkit: make PyTorch models smaller and faster with one line.

    import quantkit
    report = quantkit.quantize_(model, "int4-weight-only", ignore=["lm_head"])
"""
from quantkit.accuracy import ComparisonReport, compare
from quantkit.api import ModuleReport, QuantizeReport, quantize_, quantize_linear
from quantkit.checkpoint import CheckpointError, convert_checkpoint, load_quantized, save_quantized
from quantkit.layers import (
    Fp8BlockLinear,
    Int4WeightOnlyLinear,
    Int8DynamicLinear,
    Int8WeightOnlyLinear,
    QuantizedLinear,
)
from quantkit.ops import backend_report
from quantkit.recipes import (
    Fp8Block,
    Int4WeightOnly,
    Int8Dynamic,
    Int8WeightOnly,
    QuantizationPlan,
    Recipe,
    RecipeError,
    load_plan,
    load_recipe_file,
    recipe_names,
)
from quantkit.rounding import INT4_ROUNDINGS

__version__ = "0.1.0"

__all__ = [
    "quantize_",
    "quantize_linear",
    "QuantizeReport",
    "ModuleReport",
    "Recipe",
    "Fp8Block",
    "Int8Dynamic",
    "Int8WeightOnly",
    "Int4WeightOnly",
    "QuantizationPlan",
    "RecipeError",
    "load_plan",
    "load_recipe_file",
    "recipe_names",
    "QuantizedLinear",
    "Fp8BlockLinear",
    "Int8DynamicLinear",
    "Int8WeightOnlyLinear",
    "Int4WeightOnlyLinear",
    "backend_report",
    "save_quantized",
    "load_quantized",
    "convert_checkpoint",
    "CheckpointError",
    "compare",
    "ComparisonReport",
    "INT4_ROUNDINGS",
]
