"""Render a :class:`~quantkit.accuracy.compare.ComparisonReport` as a terminal table, JSON or CSV.

JSON holds every number; an infinite SQNR (a layer whose output did not change at all) is written
as ``null``, since JSON has no infinity. CSV has one row per recipe and layer plus one row per recipe
with ``layer = "(model output)"`` for the whole-model numbers; infinite values are written ``inf``.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from quantkit.accuracy.compare import ComparisonReport

MODEL_ROW = "(model output)"

CSV_COLUMNS = ["recipe", "layer", "out_features", "in_features", "status", "format", "sqnr_db", "rel_error",
               "sqnr_db_in_model", "rel_error_in_model", "cosine_mean", "cosine_min", "max_abs_diff",
               "perplexity", "original_perplexity", "top1_agreement", "quantize_seconds"]


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def to_dict(report: "ComparisonReport") -> dict[str, Any]:
    data = dataclasses.asdict(report)
    for result, item in zip(report.results, data["results"]):
        item["worst_layer"] = result.worst_layer.name if result.worst_layer else None
    return _finite(data)


def to_json(report: "ComparisonReport", indent: int = 2) -> str:
    return json.dumps(to_dict(report), indent=indent, allow_nan=False)


def _csv_number(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return "inf" if value == math.inf else "-inf" if value == -math.inf else repr(value)
    return value


def to_csv(report: "ComparisonReport") -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for result in report.results:
        out = result.output
        writer.writerow({k: _csv_number(v) for k, v in {
            "recipe": result.label, "layer": MODEL_ROW,
            "status": f"{result.quantized_layers}/{result.linear_layers} quantized",
            "sqnr_db": out.sqnr_db, "rel_error": out.rel_error, "cosine_mean": out.cosine_mean,
            "cosine_min": out.cosine_min, "max_abs_diff": out.max_abs_diff, "perplexity": out.perplexity,
            "original_perplexity": report.original_perplexity, "top1_agreement": out.top1_agreement,
            "quantize_seconds": result.quantize_seconds}.items()})
        for layer in result.layers:
            writer.writerow({k: _csv_number(v) for k, v in {
                "recipe": result.label, "layer": layer.name, "out_features": layer.shape[0],
                "in_features": layer.shape[1], "status": layer.status, "format": layer.format,
                "sqnr_db": layer.sqnr_db, "rel_error": layer.rel_error, "sqnr_db_in_model": layer.sqnr_db_in_model,
                "rel_error_in_model": layer.rel_error_in_model}.items()})
    return buf.getvalue()


def _fmt(value: float | None, spec: str) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if math.isnan(value):
        return "nan"
    return format(value, spec)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


_ROWS_NAME = {"embedding": "sentences", "causal-lm": "token positions", "module": "output rows"}


def table(report: "ComparisonReport", layers: bool = True) -> str:
    lines = [f"model {report.model} ({report.kind}), {report.rows} {_ROWS_NAME.get(report.kind, 'rows')} in "
             f"{report.inputs} batch{'es' if report.inputs != 1 else ''}, {report.device}, {report.dtype}"]
    if report.original_perplexity is not None:
        lines.append(f"original perplexity {report.original_perplexity:.4f}")
    lm = report.kind == "causal-lm"
    width = max([len("recipe")] + [len(r.label) for r in report.results])
    head = (f"{'recipe':<{width}}  {'layers':>7}  {'linear MiB':>14}  {'quant s':>7}  {'cos mean':>8}  "
            f"{'cos min':>8}  {'max|diff|':>9}  {'rel err':>7}  {'SQNR dB':>7}")
    if lm:
        head += f"  {'ppl':>9}  {'top-1':>6}"
    lines += ["", head, "-" * len(head)]
    for r in report.results:
        o = r.output
        row = (f"{r.label:<{width}}  {f'{r.quantized_layers}/{r.linear_layers}':>7}  "
               f"{_mib(r.bytes_before) + ' -> ' + _mib(r.bytes_after):>14}  {r.quantize_seconds:>7.2f}  "
               f"{_fmt(o.cosine_mean, '.5f'):>8}  {_fmt(o.cosine_min, '.5f'):>8}  {_fmt(o.max_abs_diff, '.4g'):>9}  "
               f"{_fmt(o.rel_error, '.4f'):>7}  {_fmt(o.sqnr_db, '.2f'):>7}")
        if lm:
            row += f"  {_fmt(o.perplexity, '.4f'):>9}  {_fmt(o.top1_agreement, '.4f'):>6}"
        lines.append(row)
    if layers and report.results:
        lines += ["", "per layer: SQNR dB and rel err ||dy||/||y|| of the layer alone on the original's inputs, "
                      "and rel err inside the quantized model"]
        names = [layer.name for layer in report.results[0].layers]
        shapes = {layer.name: layer.shape for layer in report.results[0].layers}
        by_recipe = [{layer.name: layer for layer in r.layers} for r in report.results]
        name_width = max([len("layer")] + [len(n) for n in names])
        cell = 26
        head = f"{'layer':<{name_width}}  {'shape':>11}" + "".join(f"  {r.label[:cell]:>{cell}}"
                                                                   for r in report.results)
        sub = f"{'':<{name_width}}  {'':>11}" + "".join(f"  {'SQNR  rel err  in model':>{cell}}"
                                                        for _ in report.results)
        lines += [head, sub, "-" * len(head)]
        for name in names:
            cells = []
            for layers_of in by_recipe:
                layer = layers_of.get(name)
                if layer is None:
                    cells.append(f"{'-':>{cell}}")
                elif layer.status != "quantized":
                    cells.append(f"{'kept (' + layer.status.split(':')[0] + ')':>{cell}}")
                elif layer.calls == 0:
                    cells.append(f"{'not run':>{cell}}")
                else:
                    cells.append(f"{_fmt(layer.sqnr_db, '.1f'):>6} {_fmt(layer.rel_error, '.4f'):>8} "
                                 f"{_fmt(layer.rel_error_in_model, '.4f'):>9}".rjust(cell))
            out, inp = shapes[name]
            lines.append(f"{name:<{name_width}}  {f'{out}x{inp}':>11}" + "".join(f"  {c}" for c in cells))
    if report.backends:
        lines += ["", "ran: " + ", ".join(f"{k}: {v}" for k, v in report.backends.items())]
    return "\n".join(lines)
