"""Accuracy of quantized models: ``compare`` (per-layer and whole-model error of each recipe)."""
from quantkit.accuracy.compare import ComparisonReport, LayerError, OutputError, RecipeResult, compare

__all__ = ["compare", "ComparisonReport", "RecipeResult", "LayerError", "OutputError"]
