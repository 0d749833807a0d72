"""End-to-end benchmark: prefill and decode speed and weight memory of a Llama-3-8B-shaped decoder, in bf16
and with each recipe, against bf16 in the same run.

For bf16 and then each recipe, a fresh model is built from the same seed (random N(0, 0.02²) weights
drawn on the GPU; rebuilding is faster than copying and keeps one model in memory at a time), the
recipe is applied with ``quantize_`` (the lm_head too unless ``quantize_lm_head`` is off; the
embedding stays bf16), and then:

* prefill: batch 1 × ``prefill_len`` tokens from position 0, logits of the last token only; median
  of ``prefill_reps`` timed runs (CUDA events) of a CUDA-graph replay;
* decode, for each batch size: a ``prompt_len`` prefill, then one decode step — model forward at
  the position in a static buffer, greedy argmax written back into the static token buffer, position
  += 1 — captured once in a CUDA graph (``torch.cuda.CUDAGraph``, manual capture) and replayed
  ``decode_steps`` times back to back; tokens/s = batch × steps / elapsed;
* memory: bytes of every nn.Linear / quantized layer (parameters and buffers), of the whole model,
  ``torch.cuda.memory_allocated`` after quantization and ``max_memory_allocated`` over the runs;
* a check that the pieces compose: the last-token prefill logits against bf16's (relative error).

On a GPU the elementwise glue between the linear layers (RMSNorm + residual add, RoPE, SiLU·up) runs
as ``torch.compile``'d functions (``fuse_glue``; see :class:`quantkit.bench.decoder.Glue`) while every
linear layer runs eagerly, exactly as a user calls it. ``graphs=False`` times eager calls instead;
``compile=True`` runs the whole model under ``torch.compile(fullgraph=True)`` (inside the same manual
graph capture; minutes of compilation per recipe at 32 layers). On a CPU the graphs are
skipped and a ``perf_counter`` timer is used, so the tests run the whole benchmark on a tiny model.
"""
from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from quantkit.api import quantize_
from quantkit.bench import common
from quantkit.bench.decoder import (EAGER_GLUE, Decoder, DecoderConfig, build_decoder, compiled_glue_error,
                                    round_up)
from quantkit.layers import QuantizedLinear
from quantkit.recipes import recipe_names

KIND = "quantkit-bench-e2e"
BF16 = "bf16"
GiB = 2**30


@dataclass
class E2EConfig:
    preset: str = "llama3-8b"
    n_layers: int | None = None  # None: the preset's
    recipes: list[str] = field(default_factory=recipe_names)
    device: str | None = None
    prefill_len: int = 2048
    prefill_reps: int = 5
    decode_batches: list[int] = field(default_factory=lambda: [1, 16])
    prompt_len: int = 16
    decode_steps: int = 128
    graphs: bool = True
    fuse_glue: bool = True  # compiled elementwise glue between the linears (GPU only; see decoder.Glue)
    compile: bool = False
    quantize_lm_head: bool = True
    seed: int = 0

    def decoder_config(self) -> DecoderConfig:
        overrides = {} if self.n_layers is None else {"n_layers": self.n_layers}
        return DecoderConfig.preset(self.preset, **overrides)


class Step:
    """``fn()`` run eagerly, or captured once into a CUDA graph and replayed.

    ``warmup`` eager calls come first (on a side stream when capturing, as CUDA graphs require): they
    compile the Triton kernels and let the allocator settle. If capture fails, the step stays eager
    and ``graph_error`` says why, so a layer that cannot be captured shows up in the table instead of
    stopping the run.
    """

    def __init__(self, fn: Callable[[], Any], device: torch.device, use_graph: bool, warmup: int = 2) -> None:
        self.fn = fn
        self.graph: torch.cuda.CUDAGraph | None = None
        self.graph_error: str | None = None
        self.out = None
        if device.type == "cuda" and use_graph:
            stream = torch.cuda.Stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):
                for _ in range(warmup):
                    self.out = fn()
            torch.cuda.current_stream(device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph):
                    self.out = fn()
                self.graph = graph
            except Exception as exc:  # noqa: BLE001 - fall back to eager, and say so
                self.graph_error = f"{exc.__class__.__name__}: {str(exc)[:300]}"
                torch.cuda.synchronize(device)
        else:
            for _ in range(warmup):
                self.out = fn()

    @property
    def mode(self) -> str:
        if self.graph is not None:
            return "cuda-graph"
        return "eager (capture failed)" if self.graph_error else "eager"

    def __call__(self):
        if self.graph is not None:
            self.graph.replay()
            return self.out
        self.out = self.fn()
        return self.out


class _Clock:
    """Elapsed milliseconds of GPU work (CUDA events) or of wall time on a CPU."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def time_ms(self, fn: Callable[[], Any]) -> float:
        if self.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3


def linear_nbytes(model: nn.Module) -> int:
    """Bytes of every nn.Linear and quantized linear layer (parameters and buffers)."""
    return sum(common.module_nbytes(m) for m in model.modules() if isinstance(m, (nn.Linear, QuantizedLinear)))


def run_e2e(config: E2EConfig, log: Callable[[str], None] = print, argv=None) -> dict[str, Any]:
    device = common.resolve_device(config.device)
    cfg = config.decoder_config()
    recipes = [common.parse_recipe(r) for r in config.recipes]
    if config.decode_steps <= 0 or config.prompt_len <= 0 or config.prefill_len <= 0:
        raise ValueError("prefill_len, prompt_len and decode_steps must be positive")
    started = time.perf_counter()
    env = common.environment(device, argv)
    log(f"end-to-end benchmark on {env['device']}: {cfg.n_layers}-layer {config.preset} decoder "
        f"({cfg.linear_params() / 1e9:.2f} B linear parameters)")
    glue_error = None
    if config.fuse_glue and not config.compile and device.type == "cuda":
        glue_error = compiled_glue_error(device)
        if glue_error:
            log(f"  compiled glue unavailable, running it eagerly: {glue_error}")
    fuse = config.fuse_glue and glue_error is None
    rows: list[dict[str, Any]] = []
    ref_logits = None
    for label, recipe in [(BF16, None)] + recipes:
        t0 = time.perf_counter()
        try:
            row, logits = _bench_one(label, recipe, cfg, config, device, log, fuse)
        except Exception as exc:  # noqa: BLE001 - keep the other recipes' rows
            row, logits = {"method": label, "error": f"{exc.__class__.__name__}: {str(exc)[:300]}"}, None
            log(f"  [fail] {label}: {row['error']}")
        _free(device)
        if label == BF16:
            ref_logits = logits
        elif logits is not None and ref_logits is not None:
            row["logits_rel_err"] = ((logits.double() - ref_logits.double()).norm() / ref_logits.double().norm()).item()
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
        log(f"{label} done in {row['seconds']:.1f} s")
    base = rows[0] if rows and rows[0]["method"] == BF16 and "error" not in rows[0] else None
    for row in rows:
        _add_ratios(row, base, config.decode_batches)
    return {
        "kind": KIND,
        "version": 1,
        "environment": env,
        "settings": {
            "preset": config.preset, "config": cfg.to_dict(), "recipes": [label for label, _ in recipes],
            "dtype": "bfloat16", "prefill_len": config.prefill_len,
            "prefill_reps": config.prefill_reps, "decode_batches": list(config.decode_batches),
            "prompt_len": config.prompt_len, "decode_steps": config.decode_steps, "graphs": config.graphs,
            "fuse_glue": config.fuse_glue, "glue_error": glue_error, "compile": config.compile,
            "quantize_lm_head": config.quantize_lm_head, "seed": config.seed,
            "weights": "N(0, 0.02^2)",
        },
        "rows": rows,
        "elapsed_s": time.perf_counter() - started,
    }


def _bench_one(label, recipe, cfg: DecoderConfig, config: E2EConfig, device: torch.device, log, fuse: bool):
    row: dict[str, Any] = {"method": label}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    model = build_decoder(cfg, device, torch.bfloat16, config.seed)
    row["build_s"] = time.perf_counter() - t0
    row["bf16_linear_bytes"] = linear_nbytes(model)
    if recipe is not None:
        t0 = time.perf_counter()
        report = quantize_(model, recipe, ignore=() if config.quantize_lm_head else ("lm_head",))
        _sync(device)
        row["quantize_s"] = time.perf_counter() - t0
        row["quantized_modules"] = len(report.quantized)
        row["skipped_modules"] = [m.name for m in report.skipped]
    row["linear_bytes"] = linear_nbytes(model)
    row["model_bytes"] = common.module_nbytes(model)
    if device.type == "cuda":
        row["resident_bytes"] = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    runner: Callable = model
    if config.compile:
        runner = torch.compile(model, fullgraph=True, dynamic=False)
    elif fuse and device.type == "cuda":
        model.fuse_glue()
    row["glue"] = "whole model compiled" if config.compile else (
        "compiled" if model.glue is not EAGER_GLUE else "eager")
    clock = _Clock(device)
    modes = set()
    with torch.no_grad():
        logits = _prefill(model, runner, config, device, clock, row, modes)
        for batch in config.decode_batches:
            _decode(model, runner, batch, config, device, clock, row, modes)
    row["backend"] = common.layer_backends(model, device) if recipe is not None else (
        "cuBLAS" if device.type == "cuda" else "torch")
    row["mode"] = "+".join(sorted(modes))
    if device.type == "cuda":
        row["peak_bytes"] = torch.cuda.max_memory_allocated(device)
    log(_row_line(row, config.decode_batches))
    del model, runner
    return row, logits


def _prefill(model: Decoder, runner, config: E2EConfig, device, clock: _Clock, row, modes) -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(config.seed + 1)
    tokens = torch.randint(0, model.config.vocab_size, (1, config.prefill_len), generator=gen).to(device)
    model.setup_cache(1, round_up(config.prefill_len, 64))
    step = Step(lambda: runner(tokens, None, True), device, config.graphs)
    row["prefill_graph_error"] = step.graph_error
    modes.add(step.mode)
    times = [clock.time_ms(step) for _ in range(config.prefill_reps)]
    ms = statistics.median(times)
    row["prefill_ms"] = ms
    row["prefill_tok_s"] = config.prefill_len / (ms * 1e-3)
    logits = step.out[0, -1].float().cpu().clone()
    del step
    model.free_cache()
    return logits


def _decode(model: Decoder, runner, batch: int, config: E2EConfig, device, clock: _Clock, row, modes) -> None:
    gen = torch.Generator(device="cpu").manual_seed(config.seed + 2)
    prompt = torch.randint(0, model.config.vocab_size, (batch, config.prompt_len), generator=gen).to(device)
    warm = 4  # eager warm-up calls + first replays, all writing cache positions after the prompt
    model.setup_cache(batch, round_up(config.prompt_len + config.decode_steps + warm, 64))
    first = runner(prompt, None, True)
    token = first[:, -1].argmax(-1, keepdim=True)
    pos = torch.tensor([config.prompt_len], device=device)

    def one_step():
        logits = runner(token, pos, False)
        token.copy_(logits[:, -1].argmax(-1, keepdim=True))
        pos.add_(1)
        return logits

    step = Step(one_step, device, config.graphs, warmup=2)
    row[f"decode_b{batch}_graph_error"] = step.graph_error
    modes.add(step.mode)
    step()
    step()  # the first replays upload the graph; keep them out of the timing
    pos.fill_(config.prompt_len)

    def run_all():
        for _ in range(config.decode_steps):
            step()

    ms = clock.time_ms(run_all)
    if int(pos.item()) != config.prompt_len + config.decode_steps:
        raise RuntimeError(f"decode: position {int(pos.item())} after {config.decode_steps} steps from "
                           f"{config.prompt_len}: the step did not run as captured")
    row[f"decode_b{batch}_ms_per_step"] = ms / config.decode_steps
    row[f"decode_b{batch}_tok_s"] = batch * config.decode_steps / (ms * 1e-3)
    del step
    model.free_cache()


def _add_ratios(row: dict[str, Any], base: dict[str, Any] | None, batches) -> None:
    keys = ["prefill_tok_s"] + [f"decode_b{b}_tok_s" for b in batches]
    for key in keys:
        row[key.replace("_tok_s", "_speedup")] = (row[key] / base[key] if base and row.get(key) and base.get(key)
                                                  else None)
    for key in ("linear_bytes", "model_bytes", "resident_bytes", "peak_bytes"):
        row[key.replace("_bytes", "_ratio")] = (row[key] / base[key] if base and row.get(key) and base.get(key)
                                                else None)


def _row_line(row: dict[str, Any], batches) -> str:
    parts = [f"  {row['method']:<18} prefill {row['prefill_tok_s']:10,.0f} tok/s"]
    for b in batches:
        parts.append(f"decode b{b} {row[f'decode_b{b}_tok_s']:9,.1f} tok/s")
    parts.append(f"linear weights {row['linear_bytes'] / GiB:6.2f} GiB [{row.get('mode', '')}]")
    return "  ".join(parts)


def _sync(device: torch.device) -> None:
    common.cuda_sync(device)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------- tables
def ratio_columns(result: dict[str, Any]) -> dict[str, list[float | None]]:
    """{column label: [ratio to bf16 per row]} for the chart."""
    batches = result["settings"]["decode_batches"]
    cols = {f"prefill {result['settings']['prefill_len']} tok": [r.get("prefill_speedup") for r in result["rows"]]}
    for b in batches:
        cols[f"decode batch {b}"] = [r.get(f"decode_b{b}_speedup") for r in result["rows"]]
    cols["linear weight bytes"] = [r.get("linear_ratio") for r in result["rows"]]
    return cols


def to_markdown(result: dict[str, Any]) -> str:
    env, s = result["environment"], result["settings"]
    cfg = s["config"]
    batches = s["decode_batches"]
    out = ["## End-to-end decoder benchmark", ""]
    out += common.environment_lines(env)
    out.append(f"- Model: Llama-3-8B-shaped decoder, {cfg['n_layers']} layers (hidden {cfg['hidden_size']}, "
               f"{cfg['n_heads']} heads / {cfg['n_kv_heads']} KV heads × {cfg['head_dim']}, MLP "
               f"{cfg['intermediate_size']} SwiGLU, vocab {cfg['vocab_size']}), random {s['weights']} weights; "
               f"lm_head {'quantized with the recipe' if s['quantize_lm_head'] else 'kept bf16'}, embedding bf16")
    how = "each step a CUDA-graph replay (manual capture) where the device allows" if s["graphs"] else "eager calls"
    if s["compile"]:
        how += "; whole model under torch.compile(fullgraph=True)"
    elif s.get("fuse_glue") and env.get("device_type") == "cuda" and not s.get("glue_error"):
        how += ("; linear layers eager, the elementwise glue between them (RMSNorm + residual add, RoPE, "
                "SiLU·up) torch.compile'd per function")
    elif s.get("glue_error"):
        how += f"; glue eager (torch.compile failed: {s['glue_error']})"
    out.append(f"- Prefill: batch 1 × {s['prefill_len']} tokens, last-token logits, median of "
               f"{s['prefill_reps']}; decode: {s['prompt_len']}-token prompt, then {s['decode_steps']} greedy "
               f"steps replayed back to back; {how}")
    ok = [r for r in result["rows"] if "error" not in r]
    unit, div = ("GiB", GiB) if any(r["linear_bytes"] >= GiB for r in ok) else ("MiB", 2**20)
    header = (["method", "backend", "mode", "prefill tok/s", "× bf16"]
              + [c for b in batches for c in (f"decode b{b} tok/s", "× bf16")]
              + [f"Linear weights {unit}", "× bf16", f"peak alloc {unit}", "× bf16", "logits rel. err vs bf16"])
    table = []
    for r in result["rows"]:
        if "error" in r:
            table.append([r["method"], "failed", r["error"]] + [""] * (len(header) - 3))
            continue
        cells = [r["method"], r.get("backend", ""), r.get("mode", ""), f"{r['prefill_tok_s']:,.0f}",
                 _x(r.get("prefill_speedup"))]
        for b in batches:
            cells += [f"{r[f'decode_b{b}_tok_s']:,.1f}", _x(r.get(f"decode_b{b}_speedup"))]
        cells += [f"{r['linear_bytes'] / div:,.2f}", _x(r.get("linear_ratio")),
                  common.fmt(r.get("peak_bytes") and r["peak_bytes"] / div, ",.2f"), _x(r.get("peak_ratio")),
                  common.fmt(r.get("logits_rel_err"), ".4f", "—")]
        table.append(cells)
    out += ["", common.markdown_table(header, table, "lll" + "r" * (len(header) - 3))]
    notes = []
    for r in result["rows"]:
        for key, value in r.items():
            if key.endswith("graph_error") and value:
                notes.append(f"- {r['method']}: {key.replace('_graph_error', '')} ran eagerly, capture failed: {value}")
        if r.get("skipped_modules"):
            notes.append(f"- {r['method']}: kept in high precision: {', '.join(r['skipped_modules'])}")
    if notes:
        out += [""] + notes
    out += ["", "Decode ms per step: " + "; ".join(
        f"{r['method']} " + ", ".join(f"b{b} {r[f'decode_b{b}_ms_per_step']:.2f}" for b in batches) for r in ok)]
    out += ["", "Prefill ms: " + "; ".join(f"{r['method']} {r['prefill_ms']:.1f}" for r in ok)]
    return "\n".join(out) + "\n"


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"
