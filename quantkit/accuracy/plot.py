"""A PNG of each recipe's error per linear layer (matplotlib is imported only here, when asked for)."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from quantkit.accuracy.compare import ComparisonReport


def plot_layer_errors(report: "ComparisonReport", path: str | os.PathLike) -> Path:
    """Relative error ||dy||/||y|| of every linear layer (x: layers in model order), one line per
    recipe: solid = the layer alone on the original's inputs, dotted = inside the quantized model."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("--plot needs matplotlib (pip install 'quantkit[plot]')") from None
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"the plot is written as PNG: give a file name ending in .png, got {path.name}")
    if not path.parent.exists():
        raise FileNotFoundError(f"directory {path.parent} does not exist")
    names = [layer.name for layer in report.results[0].layers] if report.results else []
    fig_width = min(24.0, max(8.0, 0.22 * len(names) + 3))
    fig, ax = plt.subplots(figsize=(fig_width, 5.5))

    def value(v: float) -> float:
        return v if math.isfinite(v) and v > 0 else math.nan

    for i, result in enumerate(report.results):
        by_name = {layer.name: layer for layer in result.layers}
        local = [value(by_name[n].rel_error) if n in by_name and by_name[n].status == "quantized" else math.nan
                 for n in names]
        in_model = [value(by_name[n].rel_error_in_model) if n in by_name else math.nan for n in names]
        color = f"C{i % 10}"
        ax.plot(range(len(names)), local, marker="o", markersize=3, linewidth=1.2, color=color,
                label=f"{result.label} (layer alone)")
        ax.plot(range(len(names)), in_model, linestyle=":", linewidth=1.2, color=color,
                label=f"{result.label} (in model)")
    ax.set_yscale("log")
    ax.set_ylabel("relative error ||Δy|| / ||y||")
    ax.set_xlabel("linear layer (model order)")
    model = Path(report.model)
    title = f"{model.parent.name}/{model.name}" if model.parent.name else model.name
    ax.set_title(f"{title}: output error per linear layer ({report.device}, {report.dtype})")
    if len(names) <= 80:
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=90, fontsize=6)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    from quantkit.atomic import write_with

    try:
        return write_with(path, lambda tmp: fig.savefig(tmp, dpi=120))
    finally:
        plt.close(fig)
