"""PNG charts of benchmark results, drawn from the result dict or its JSON file.

matplotlib is optional (the GPU machine may not have it): it is imported only here, only when a chart
is asked for, and its absence is reported, not raised — draw the chart later from the JSON with
``quantkit bench plot results.json out.png``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; never needs a display
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailable(f"matplotlib is not installed ({exc}); draw it later with "
                              f"`quantkit bench plot RESULT.json OUT.png` where matplotlib is") from None
    return plt


def plot_result(result: dict[str, Any], path: str | Path) -> Path:
    """Draw the chart for a layers or e2e result; raise PlotUnavailable without matplotlib."""
    from quantkit.bench import e2e, layers

    kind = result.get("kind")
    if kind == layers.KIND:
        return plot_layers(result, path)
    if kind == e2e.KIND:
        return plot_e2e(result, path)
    raise ValueError(f"unknown benchmark result kind {kind!r}")


def _subtitle(result: dict[str, Any]) -> str:
    env = result["environment"]
    return f"{env['device']} · torch {env['torch']} · triton {env['triton']} · {env['date']}"


def plot_layers(result: dict[str, Any], path: str | Path) -> Path:
    """Speedup over bf16 against M, one panel per N×K shape, one line per recipe/peer (bf16 = 1)."""
    from quantkit.bench.layers import BF16, method_order

    plt = _pyplot()
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    shapes = [tuple(s) for s in result["settings"]["shapes"]]
    shapes += sorted({(r["N"], r["K"]) for r in result["rows"]} - set(shapes))
    methods = [m for m in method_order(result) if m != BF16]
    fig, axes = plt.subplots(1, len(shapes), figsize=(5.2 * len(shapes), 4.4), squeeze=False)
    for ax, (n, k) in zip(axes[0], shapes):
        ax.axhline(1.0, color="black", linewidth=1.2, label="bf16 F.linear")
        for name in methods:
            pts = sorted((r["M"], r["speedup"]) for r in result["rows"]
                         if r["method"] == name and r["N"] == n and r["K"] == k and r.get("speedup"))
            if pts:
                peer = any(r.get("kind") == "peer" for r in result["rows"] if r["method"] == name)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name,
                        linestyle="--" if peer else "-", alpha=0.7 if peer else 1.0)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)  # 0.5x and 2x equally far from 1
        ms = sorted({r["M"] for r in result["rows"] if r["N"] == n and r["K"] == k})
        ax.set_xticks(ms, [str(m) for m in ms])
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"N×K = {n}×{k}")
        ax.set_xlabel("M (tokens)")
        ax.set_ylabel("speedup over bf16")
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8)
    fig.suptitle("quantkit per-layer forward, speedup over bf16\n" + _subtitle(result), fontsize=10)
    fig.tight_layout(rect=(0, 0.08 + 0.03 * (len(labels) // 7), 1, 1))
    return _save(fig, plt, path)


def plot_e2e(result: dict[str, Any], path: str | Path) -> Path:
    """Bars: each recipe's prefill and decode throughput and weight memory as ratios to bf16."""
    from quantkit.bench.e2e import ratio_columns

    plt = _pyplot()
    columns = ratio_columns(result)
    names = [r["method"] for r in result["rows"]]
    fig, ax = plt.subplots(figsize=(1.6 + 1.5 * len(names), 4.4))
    width = 0.8 / max(len(columns), 1)
    for i, (label, values) in enumerate(columns.items()):
        xs = [j + (i - (len(columns) - 1) / 2) * width for j in range(len(names))]
        ax.bar(xs, [v if v is not None else 0 for v in values], width, label=label)
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=15)
    ax.set_ylabel("ratio to bf16")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    layers = result["settings"]["config"]["n_layers"]
    ax.set_title(f"quantkit decoder ({layers} layers), ratio to bf16\n" + _subtitle(result), fontsize=10)
    fig.tight_layout()
    return _save(fig, plt, path)


def _save(fig, plt, path: str | Path) -> Path:
    from quantkit.atomic import write_with

    try:
        return write_with(path, lambda tmp: fig.savefig(tmp, dpi=120))
    finally:
        plt.close(fig)
