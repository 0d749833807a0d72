"""Per-layer benchmark: every recipe's whole forward against bf16 ``F.linear`` on Llama-3-8B shapes.

Method (PERFORMANCE.md's, so the numbers compare with the peer anchors there):

* shapes N×K (out × in) ∈ {4096×4096, 14336×4096, 4096×14336}, M (tokens) ∈ {1, 16, 128, 1024, 4096};
  weights ~ N(0, 0.02²) in bf16, inputs ~ N(0, 1) in bf16, no bias;
* each recipe is applied with ``quantkit.quantize_`` to ``nn.Sequential(nn.Linear)`` and the module's
  forward is timed as a user calls it: activation quantization, every launch, the epilogue;
* ``triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")`` (L2 flushed between
  calls); the baseline is ``F.linear`` on the bf16 weight in the same process;
* bandwidth counts weight (every buffer of the layer) + activation + output bytes, and is compared
  with a device-to-device copy measured in the same run (bytes read + written);
* error is ‖y − y_ref‖ / ‖y_ref‖ with y_ref = float64 ``F.linear`` of the original bf16 weight;
* at decode sizes (M <= ``FLOOR_MAX_M``, on a GPU) each row also gets the read floor of its bytes under the
  same timer (:mod:`quantkit.bench.floor`), and bf16's time over it: the largest speedup over bf16 that any
  kernel moving those bytes could show in that cell.

On a machine without a GPU the same code runs on the CPU with a ``perf_counter`` timer (the reference
numerics), which is how the tests keep the harness from rotting.
"""
from __future__ import annotations

import gc
import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from quantkit.api import quantize_
from quantkit.bench import common, floor
from quantkit.recipes import load_plan, recipe_names

KIND = "quantkit-bench-layers"
LLAMA_SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336))
BENCH_M = (1, 16, 128, 1024, 4096)
BF16 = "bf16"
#: Rows up to this M get a read floor: there a layer's time is the time to move its bytes; at larger M it is
#: the arithmetic's, and a read floor would say nothing.
FLOOR_MAX_M = 16

#: Upper bounds on ‖y − y_ref‖/‖y_ref‖ for weights N(0, 0.02²) and inputs N(0, 1) (PERFORMANCE.md
#: measured fp8-block 0.037, int8-dynamic 0.014, int8-weight-only 0.010, int4 g128 0.105, bf16
#: 0.0017). A row above its bound is marked: a fast kernel that is wrong must not pass unnoticed.
ERROR_BOUNDS = {
    BF16: 0.005,
    "fp8-block": 0.05,
    "int8-dynamic": 0.02,
    "int8-weight-only": 0.015,
    "int4-weight-only": 0.13,
}


@dataclass
class LayerBenchConfig:
    shapes: list[tuple[int, int]] = field(default_factory=lambda: list(LLAMA_SHAPES))
    ms: list[int] = field(default_factory=lambda: list(BENCH_M))
    recipes: list[str] = field(default_factory=recipe_names)
    device: str | None = None  # None: the GPU if there is one
    warmup_ms: float = common.WARMUP_MS
    rep_ms: float = common.REP_MS
    peers: bool = True
    compile_peers: bool = False
    copy_bytes: int | None = None
    seed: int = 0
    gpu_time: bool = True  # on a GPU, also the CUDA-graph GPU time and the host time per call of every row
    rounds: int = 1  # eager timings per row, interleaved across the cell's methods; the row keeps their median
    floor: bool = True  # on a GPU, the read floor of each row's bytes at M <= FLOOR_MAX_M (a few s a cell)


@dataclass
class _Method:
    name: str
    kind: str  # "bf16", "recipe" or "peer"
    forward: Callable[[torch.Tensor], torch.Tensor]
    nbytes: int
    bound: float | None
    module: nn.Module | None = None
    recipe: Any = None
    fmt: str | None = None  # the recipe type (a peer: the quantkit recipe of the same weight format)


def _recipe_type(recipe: Any) -> str | None:
    plan = load_plan(recipe)
    return plan.default.name if plan.default is not None else None


def _recipe_method(label: str, recipe: Any, weight: torch.Tensor) -> _Method | str:
    """The quantized ``nn.Sequential(nn.Linear)`` for ``recipe``, or why the recipe skipped it."""
    n, k = weight.shape
    model = nn.Sequential(nn.Linear(k, n, bias=False, device=weight.device, dtype=weight.dtype))
    with torch.no_grad():
        model[0].weight.copy_(weight)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a layer the recipe cannot take becomes a row saying why
        report = quantize_(model, recipe)
    if not report.quantized:
        return f"not quantized: {report.modules[0].reason if report.modules else 'no linear found'}"
    fmt = _recipe_type(recipe)
    return _Method(label, "recipe", model, common.module_nbytes(model), ERROR_BOUNDS.get(fmt), module=model,
                   recipe=recipe, fmt=fmt)


def run_layers(config: LayerBenchConfig, log: Callable[[str], None] = print, argv=None) -> dict[str, Any]:
    """Run the benchmark; return the result dict (``kind``, ``environment``, ``settings``, ``rows``, ...)."""
    if not isinstance(config.rounds, int) or isinstance(config.rounds, bool) or config.rounds < 1:
        raise ValueError(f"rounds must be a whole number >= 1, got {config.rounds!r}")
    device = common.resolve_device(config.device)
    dtype = torch.bfloat16  # the baseline and every table are bf16, as in PERFORMANCE.md
    recipes = [common.parse_recipe(r) for r in config.recipes]
    torch.manual_seed(config.seed)
    started = time.perf_counter()
    env = common.environment(device, argv)
    log(f"per-layer benchmark on {env['device']} (torch {env['torch']}, triton {env['triton']})")
    copy_gbps = common.copy_bandwidth_gbps(device, config.copy_bytes, config.warmup_ms, config.rep_ms)
    log(f"device-to-device copy: {copy_gbps:,.0f} GB/s (read + write)")
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for n, k in config.shapes:
        shape_start = time.perf_counter()
        weight = (torch.randn(n, k, device=device, dtype=torch.float32) * 0.02).to(dtype)
        methods: list[_Method] = [_Method(BF16, "bf16", lambda x, w=weight: F.linear(x, w), weight.numel()
                                          * weight.element_size(), ERROR_BOUNDS[BF16])]
        failed: dict[str, str] = {}
        for label, recipe in recipes:
            try:
                built = _recipe_method(label, recipe, weight)
            except Exception as exc:  # noqa: BLE001 - one recipe failing must not lose the others' rows
                built = f"quantize_ failed: {exc.__class__.__name__}: {exc}"
            if isinstance(built, str):
                failed[label] = built
                log(f"  {label} {n}x{k}: {built}")
            else:
                methods.append(built)
        if config.peers:
            from quantkit.bench.peers import build_peers

            peers, peer_notes = build_peers(weight, config.compile_peers)
            methods += [_Method(p.name, "peer", p.forward, p.nbytes, None, fmt=p.fmt) for p in peers]
            for note in peer_notes:
                if note not in notes:
                    notes.append(note)
                    log(f"  {note}")
        for m in config.ms:
            rows += _run_cell(methods, failed, weight, m, device, dtype, copy_gbps, config, log)
        del methods, weight
        _free(device)
        log(f"shape {n}x{k} done in {time.perf_counter() - shape_start:.1f} s")
    return {
        "kind": KIND,
        "version": 1,
        "environment": env,
        "settings": {
            "shapes": [list(s) for s in config.shapes], "ms": list(config.ms),
            "recipes": [label for label, _ in recipes], "dtype": str(dtype).replace("torch.", ""),
            "warmup_ms": config.warmup_ms, "rep_ms": config.rep_ms, "rounds": config.rounds, "seed": config.seed,
            "timer": "triton.testing.do_bench median" if device.type == "cuda" else "perf_counter median (CPU)",
            "weights": "N(0, 0.02^2)", "inputs": "N(0, 1)",
            "floor": bool(config.floor and device.type == "cuda"), "floor_max_m": FLOOR_MAX_M,
        },
        "copy_bandwidth_GBps": copy_gbps,
        "notes": notes,
        "rows": rows,
        "elapsed_s": time.perf_counter() - started,
    }


def _run_cell(methods, failed, weight, m, device, dtype, copy_gbps, config, log) -> list[dict[str, Any]]:
    n, k = weight.shape
    x = torch.randn(m, k, device=device, dtype=torch.float32).to(dtype)
    ref = F.linear(x.double(), weight.double())
    act_out_bytes = (m * k + m * n) * x.element_size()
    rows: list[dict[str, Any]] = []
    timed: list[tuple[_Method, dict[str, Any], list[float]]] = []  # (method, row, eager ms of each round)
    for method in methods:
        row: dict[str, Any] = {"method": method.name, "kind": method.kind, "format": method.fmt, "N": n, "K": k,
                               "M": m,
                               "backend": None, "ms": None, "us": None, "speedup": None, "tflops": None,
                               "bytes": method.nbytes + act_out_bytes, "weight_bytes": method.nbytes,
                               "GBps": None, "pct_copy_bw": None, "rel_err": None, "err_bound": method.bound,
                               "within_bound": None, "error": None, "graph_us": None, "graph_speedup": None,
                               "host_us": None, "rounds_us": None, "floor_us": None, "floor_speedup": None}
        rows.append(row)
        try:
            with torch.inference_mode():
                y = method.forward(x)
                common.cuda_sync(device)
                row["rel_err"] = ((y.double() - ref).norm() / ref.norm()).item()
                del y
                row["backend"] = _backend(method, device)
                row["kernel"] = _kernel_kind(method, m, n, k, device)
                if row["kernel"] in _CUBLAS_KERNELS:
                    row["backend"] += "+cuBLAS"
                ms = common.measure_ms(lambda: method.forward(x), device, config.warmup_ms, config.rep_ms)
                if config.gpu_time and device.type == "cuda":
                    from quantkit.kernels.tuning import graph_time_ms

                    graph_ms = graph_time_ms(lambda: method.forward(x), config.warmup_ms, config.rep_ms)
                    row["graph_us"] = None if graph_ms is None else graph_ms * 1e3
                    row["host_us"] = common.host_us_per_call(lambda: method.forward(x))
        except Exception as exc:  # noqa: BLE001 - record the failure in the table and go on
            row["error"] = f"{exc.__class__.__name__}: {str(exc)[:300]}"
            log(f"  [fail] {method.name} M={m} N={n} K={k}: {row['error']}")
            _free(device)
            continue
        timed.append((method, row, [ms]))
    # More rounds (--rounds): every method timed again, the order reversed each round, so that bf16 and
    # the recipes see the same stretch of a warming GPU; each row's time is the median of its rounds.
    for r in range(1, config.rounds):
        for method, row, times in (timed[::-1] if r % 2 else timed):
            with torch.inference_mode():
                times.append(common.measure_ms(lambda: method.forward(x), device, config.warmup_ms,
                                               config.rep_ms))
    base_ms, base_graph_us = next(((statistics.median(times), row["graph_us"]) for method, row, times in timed
                                   if method.kind == "bf16"), (None, None))
    for method, row, times in timed:
        ms = statistics.median(times)
        row.update(ms=ms, us=ms * 1e3, tflops=2 * m * n * k / (ms * 1e-3) / 1e12,
                   GBps=row["bytes"] / (ms * 1e-3) / 1e9)
        if len(times) > 1:
            row["rounds_us"] = [t * 1e3 for t in times]
        row["pct_copy_bw"] = 100 * row["GBps"] / copy_gbps if copy_gbps else None
        if method.bound is not None:
            row["within_bound"] = row["rel_err"] <= method.bound
        if base_ms:
            row["speedup"] = base_ms / ms
        if row["graph_us"] and base_graph_us:
            row["graph_speedup"] = base_graph_us / row["graph_us"]
        log(f"  {method.name:<28} M={m:<5} N={n:<6} K={k:<6} {row['us']:9.1f} us  "
            f"{row['speedup'] or 0:5.2f}x  {row['tflops']:7.1f} TFLOP/s  {row['GBps']:7.0f} GB/s  "
            f"err {row['rel_err']:.4f}{'' if row['within_bound'] is not False else ' ABOVE BOUND'}"
            f"  [{row['backend']}]"
            + (f"  graph {row['graph_us']:.1f} us, host {row['host_us']:.1f} us/call" if row.get("graph_us") else ""))
    if config.floor and device.type == "cuda" and m <= FLOOR_MAX_M:
        _add_floors(timed, base_ms, device, config, log)
    for label, why in failed.items():
        rows.append({"method": label, "kind": "recipe", "N": n, "K": k, "M": m, "ms": None, "error": why})
    return rows


def _add_floors(timed, base_ms, device, config, log) -> None:
    """Each timed row's read floor (``floor_us``: the fastest plain read of its bytes under the rows' own
    timer) and ``floor_speedup``: bf16's time over that floor, the most any kernel moving those bytes could
    show against bf16 in this cell."""
    for method, row, _ in timed:
        ms = floor.read_floor_ms(row["bytes"], device,
                                 lambda fn: common.measure_ms(fn, device, config.warmup_ms, config.rep_ms))
        row["floor_us"] = ms * 1e3
        if base_ms:
            row["floor_speedup"] = base_ms / ms
        log(f"  {method.name:<28} read floor of {row['bytes'] / 1e6:.2f} MB: {row['floor_us']:.1f} us "
            f"(layer {row['us'] / row['floor_us']:.2f}x of it; at most {row['floor_speedup'] or 0:.2f}x bf16)")


def _backend(method: _Method, device: torch.device) -> str:
    if method.kind == "bf16":
        return "cuBLAS" if device.type == "cuda" else "torch"
    if method.kind == "peer":
        return "peer"
    return common.layer_backends(method.module, device)


# Configs whose GEMM is cuBLAS's (after a Triton quantization / dequantization kernel).
_CUBLAS_KERNELS = {"cublas", "dequant_mm"}


def _kernel_kind(method: _Method, m: int, n: int, k: int, device: torch.device) -> str | None:
    """The ``kernel`` of the config the layer's forward used (the tuned-config memo), if any."""
    if method.kind != "recipe" or device.type != "cuda":
        return None
    from quantkit.kernels.tuning import _MEMO, m_bucket
    from quantkit.layers import QuantizedLinear

    for module in method.module.modules():
        if isinstance(module, QuantizedLinear):
            config = _MEMO.get((module.format_name.replace("-", "_"), m_bucket(m), n, k))
            return config.get("kernel") if config else None
    return None


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------- Markdown
def _shape_label(n: int, k: int) -> str:
    return f"{n}×{k}"


def method_order(result: dict[str, Any]) -> list[str]:
    """bf16 first, then the recipes in the order asked, then peers in the order first seen."""
    order = [BF16] + list(result["settings"]["recipes"])
    for row in result["rows"]:
        if row["method"] not in order:
            order.append(row["method"])
    return order


def to_markdown(result: dict[str, Any]) -> str:
    env = result["environment"]
    settings = result["settings"]
    rows = result["rows"]
    order = method_order(result)
    others = [m for m in order if m != BF16]
    cells = sorted({(r["N"], r["K"], r["M"]) for r in rows},
                   key=lambda c: ([tuple(s) for s in settings["shapes"]].index((c[0], c[1]))
                                  if [c[0], c[1]] in settings["shapes"] else 99, c[2]))
    by_key = {(r["method"], r["N"], r["K"], r["M"]): r for r in rows}
    out = ["## Per-layer benchmark", ""]
    out += common.environment_lines(env)
    out.append(f"- Copy bandwidth (device-to-device, bytes read + written): "
               f"{result['copy_bandwidth_GBps']:,.0f} GB/s")
    rounds = settings.get("rounds", 1)
    out.append(f"- Timer: {settings['timer']} (warmup {settings['warmup_ms']} ms, rep {settings['rep_ms']} ms"
               + (f"; median of {rounds} rounds a row, interleaved across each cell's methods" if rounds > 1 else "")
               + "); "
               f"baseline bf16 `F.linear` in the same run; weights {settings['weights']}, inputs "
               f"{settings['inputs']}; error vs float64 `F.linear`")
    for note in result.get("notes", []):
        out.append(f"- {note}")
    out += ["", "### Speedup over bf16 `F.linear`", ""]
    table = []
    for n, k, m in cells:
        base = by_key.get((BF16, n, k, m))
        line = [_shape_label(n, k), m, common.fmt(base and base.get("us"), ".1f")]
        for name in others:
            r = by_key.get((name, n, k, m))
            line.append(_speedup_cell(r))
        table.append(line)
    out.append(common.markdown_table(["N×K", "M", "bf16 µs", *others], table, "lrr" + "r" * len(others)))
    if any(_host_bound(r) for r in rows):
        out += ["", f"ʰ: the eager time is more than {HOST_BOUND_RATIO:.2f}× the same forward's CUDA-graph GPU time "
                    "(next table): the host's Python and launches, not the GPU, set that figure."]
    against = against_peers(result)
    if against:
        ahead = sum(a["ahead"] for a in against)
        out += ["", "### Against the fastest peer of the same weight format", "",
                "Per recipe and cell: its speedup over bf16, and that of the fastest peer row of its format in the "
                f"same cell (eager, same timer). Ahead in {ahead} of {len(against)} recipe cells.", ""]
        recipes_with_peers = [name for name in settings["recipes"] if any(a["recipe"] == name for a in against)]
        by_cell = {(a["N"], a["K"], a["M"], a["recipe"]): a for a in against}
        table = []
        for n, k, m in cells:
            if not any((n, k, m, name) in by_cell for name in recipes_with_peers):
                continue
            line = [_shape_label(n, k), m]
            for name in recipes_with_peers:
                a = by_cell.get((n, k, m, name))
                line.append("" if a is None else
                            f"{a['speedup']:.2f}x vs {a['peer_speedup']:.2f}x {a['peer']}"
                            + ("" if a["ahead"] else " (behind)"))
            table.append(line)
        out.append(common.markdown_table(["N×K", "M", *recipes_with_peers], table,
                                         "lr" + "l" * len(recipes_with_peers)))
    if any(r.get("floor_us") for r in rows):
        out += ["", "### Against the read floor (M ≤ {})".format(settings.get("floor_max_m", FLOOR_MAX_M)), "",
                "The floor is the fastest plain read of a row's bytes (weight, x, y) under the same timer "
                "(`quantkit/bench/floor.py`). Per recipe: the speedup over bf16 as measured / the most any kernel "
                "moving those bytes could show (bf16 µs over the floor), and in brackets the layer's time over "
                "its floor.", ""]
        table = []
        for n, k, m in cells:
            base = by_key.get((BF16, n, k, m)) or {}
            if not base.get("floor_us"):
                continue
            line = [_shape_label(n, k), m, common.fmt(base.get("us"), ".1f"), common.fmt(base.get("floor_us"), ".1f")]
            for name in others:
                r = by_key.get((name, n, k, m)) or {}
                line.append("" if not (r.get("floor_speedup") and r.get("speedup")) else
                            f"{r['speedup']:.2f}x / {r['floor_speedup']:.2f}x ({r['us'] / r['floor_us']:.2f})")
            table.append(line)
        out.append(common.markdown_table(["N×K", "M", "bf16 µs", "bf16 floor µs", *others], table,
                                         "lrrr" + "r" * len(others)))
    if any(r.get("graph_us") for r in rows):
        out += ["", "### GPU time: the same forward replayed from a CUDA graph", "",
                "The same `do_bench` (L2 flushed) on one captured call, speedup over bf16's graph time, and in "
                "brackets the host µs one eager call takes to return (calls back to back, no synchronization).", ""]
        table = []
        for n, k, m in cells:
            base = by_key.get((BF16, n, k, m)) or {}
            line = [_shape_label(n, k), m, common.fmt(base.get("graph_us"), ".1f"), common.fmt(base.get("host_us"), ".0f")]
            for name in others:
                r = by_key.get((name, n, k, m)) or {}
                line.append("" if r.get("graph_speedup") is None else
                            f"{r['graph_speedup']:.2f}x ({r['host_us']:.0f})")
            table.append(line)
        out.append(common.markdown_table(["N×K", "M", "bf16 graph µs", "bf16 host µs", *others], table,
                                         "lrrr" + "r" * len(others)))
    out += ["", "### Every row", ""]
    table = []
    for n, k, m in cells:
        for name in order:
            r = by_key.get((name, n, k, m))
            if r is None:
                continue
            if r.get("ms") is None:
                table.append([_shape_label(n, k), m, name, r.get("backend") or "", "failed", "", "", "", "", "", "",
                              r.get("error") or ""])
                continue
            err = common.fmt(r["rel_err"], ".4f") + (" (above bound)" if r.get("within_bound") is False else "")
            table.append([_shape_label(n, k), m, name, r["backend"], f"{r['us']:.1f}", f"{r['speedup']:.2f}x",
                          f"{r['tflops']:.1f}", f"{r['GBps']:.0f}", common.fmt(r["pct_copy_bw"], ".0f"),
                          common.fmt(r.get("floor_us"), ".1f", ""), err, ""])
    out.append(common.markdown_table(
        ["N×K", "M", "method", "backend", "µs", "vs bf16", "TFLOP/s", "GB/s", "% copy BW", "read floor µs",
         "rel. error", "note"],
        table, "lrllrrrrrrrl"))
    out += ["", "### Output error ‖y − y_ref‖/‖y_ref‖ (range over cells)", ""]
    table = []
    for name in order:
        errs = [r["rel_err"] for r in rows if r["method"] == name and r.get("rel_err") is not None]
        if not errs:
            continue
        bound = next((r.get("err_bound") for r in rows if r["method"] == name and r.get("err_bound")), None)
        table.append([name, f"{min(errs):.4f}", f"{max(errs):.4f}", common.fmt(bound, ".3f", "")])
    out.append(common.markdown_table(["method", "min", "max", "bound"], table, "lrrr"))
    return "\n".join(out) + "\n"


def against_peers(result: dict[str, Any]) -> list[dict[str, Any]]:
    """For every recipe row with a time and every cell where a peer of the same weight format has one: the
    recipe's speedup over bf16, the fastest such peer's name and speedup, and whether the recipe is ahead."""
    rows = [r for r in result["rows"] if r.get("speedup") is not None and r.get("format")]
    out = []
    for r in rows:
        if r["kind"] != "recipe":
            continue
        peers = [p for p in rows if p["kind"] == "peer" and p["format"] == r["format"]
                 and (p["N"], p["K"], p["M"]) == (r["N"], r["K"], r["M"])]
        if not peers:
            continue
        best = max(peers, key=lambda p: p["speedup"])
        out.append({"recipe": r["method"], "N": r["N"], "K": r["K"], "M": r["M"], "speedup": r["speedup"],
                    "peer": best["method"], "peer_speedup": best["speedup"], "ahead": r["speedup"] > best["speedup"]})
    return out


def _speedup_cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    if row.get("ms") is None or row.get("speedup") is None:
        return "failed"
    mark = " (err!)" if row.get("within_bound") is False else ""
    return f"{row['speedup']:.2f}x{' ʰ' if _host_bound(row) else ''}{mark}"


# An eager time this far above the same call's CUDA-graph GPU time is the host's, not the GPU's: launch gaps
# that a graph removes are 1-3 µs a launch, under 25 % of the shortest layers measured here.
HOST_BOUND_RATIO = 1.25


def _host_bound(row: dict[str, Any] | None) -> bool:
    return bool(row and row.get("us") and row.get("graph_us") and row["us"] > HOST_BOUND_RATIO * row["graph_us"])
