"""``quantkit bench``: per-layer and end-to-end benchmarks, and charts from their JSON results.

    quantkit bench layers [--recipes ...] [--shapes 4096x4096,...] [--m 1,16,...] [--out DIR]
    quantkit bench e2e    [--layers 32] [--decode-steps 128] [--out DIR]
    quantkit bench plot   RESULT.json OUT.png

``layers`` and ``e2e`` print progress, then the Markdown tables (with device, versions, date and the
command line), and write ``<out>/layers.json`` (or ``e2e.json``, or ``--json FILE``: every raw row
and the environment), the Markdown beside it (``.md``) and the chart (``.png``; skipped with a
message when matplotlib is missing — draw it later with ``plot``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "benchmark every recipe per layer (against bf16) and end to end on a Llama-3-8B-shaped decoder"

def _recipes(values: list[str] | None) -> list[str] | None:
    """Recipes given as separate words or separated by ';' (',' separates the fields inside
    ``name:key=value,key=value``)."""
    if values is None:
        return None
    items = [r.strip() for v in values for r in v.replace(";", " ").split()]
    if not items:
        raise ValueError("--recipes needs at least one recipe")
    return items


def _common(p: argparse.ArgumentParser, default_name: str) -> None:
    p.add_argument("--recipes", nargs="+", default=None, metavar="RECIPE",
                   help="recipes to run, separated by spaces or ';': registered names, name:key=value,... "
                        "(e.g. int4-weight-only:group_size=64) or recipe files (default: every registered recipe)")
    p.add_argument("--device", default=None, help="cuda, cuda:1 or cpu (default: the GPU; without one, pass cpu)")
    p.add_argument("--out", default="out/bench", type=Path,
                   help=f"directory for {default_name}.json, .md and .png (default out/bench)")
    p.add_argument("--json", default=None, type=Path, metavar="FILE",
                   help="write the JSON here instead (the .md and .png go beside it, same stem)")
    p.add_argument("--no-plot", action="store_true", help="do not draw the PNG")
    p.add_argument("--seed", type=int, default=0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench_command", metavar="WHAT", required=True)

    p = sub.add_parser("layers", help="per-layer forward of every recipe against bf16 F.linear",
                       description="Per-layer benchmark (method: notes/bench.md): whole quantized forward vs "
                                   "bf16 F.linear, do_bench median, error vs float64.")
    _common(p, "layers")
    p.add_argument("--shapes", default="4096x4096,14336x4096,4096x14336",
                   help="comma-separated NxK (out x in) (default: the Llama-3-8B shapes)")
    p.add_argument("--m", default="1,16,128,1024,4096", help="comma-separated token counts M")
    p.add_argument("--warmup-ms", type=float, default=25.0)
    p.add_argument("--rep-ms", type=float, default=100.0)
    p.add_argument("--no-peers", action="store_true", help="skip torchao / gemlite even when importable")
    p.add_argument("--rounds", type=int, default=1,
                   help="time every row this many times, alternating the order of each cell's methods, and keep "
                        "the median (steadies the ratios of the long cells on a warming GPU)")
    p.add_argument("--no-gpu-time", action="store_true",
                   help="skip each row's CUDA-graph GPU time and host time per call (GPU only; ~1 s a row)")
    p.add_argument("--no-floor", action="store_true",
                   help="skip the read floor of each row's bytes at M <= 16 (GPU only; a few s a cell)")
    p.add_argument("--compile-peers", action="store_true", help="also time torchao under torch.compile")
    p.add_argument("--copy-mib", type=int, default=None, help="size of the bandwidth-reference copy "
                                                                  "(default 1024 MiB on a GPU, 64 on a CPU)")

    p = sub.add_parser("e2e", help="prefill / decode speed and memory of a Llama-3-8B-shaped decoder",
                       description="End-to-end benchmark: a Llama-3-8B-shaped decoder with a static KV cache, "
                                   "decode steps in CUDA graphs, bf16 and every recipe.")
    _common(p, "e2e")
    p.add_argument("--preset", default="llama3-8b", choices=["llama3-8b", "tiny"])
    p.add_argument("--layers", type=int, default=None, help="number of decoder layers (default: the preset's, 32)")
    p.add_argument("--prefill-len", type=int, default=2048)
    p.add_argument("--prefill-reps", type=int, default=5)
    p.add_argument("--batches", default="1,16", help="decode batch sizes, comma-separated")
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--decode-steps", type=int, default=128)
    p.add_argument("--no-graph", action="store_true", help="time eager calls instead of CUDA-graph replays")
    p.add_argument("--no-fuse-glue", action="store_true",
                   help="run RMSNorm/RoPE/SiLU/residual adds eagerly instead of torch.compile'd (GPU)")
    p.add_argument("--compile", action="store_true", help="torch.compile(fullgraph=True) the model too (slow "
                                                          "to compile: minutes per recipe at 32 layers)")
    p.add_argument("--keep-lm-head", action="store_true", help="keep lm_head in bf16 (default: quantize it)")

    p = sub.add_parser("plot", help="draw the PNG of a layers or e2e result JSON",
                       description="Draw the chart of a `quantkit bench layers|e2e` JSON result.")
    p.add_argument("result", type=Path, help="the JSON file the benchmark wrote")
    p.add_argument("png", type=Path, help="the PNG to write")


def run(args: argparse.Namespace) -> int:
    if args.bench_command == "plot":
        return _run_plot(args.result, args.png)
    import torch

    from quantkit.bench import common
    from quantkit.cli import UserError, check_device

    if args.device is not None:
        check_device(args.device)
    elif not torch.cuda.is_available():
        raise UserError("no CUDA GPU is visible, and the defaults are sized for one (hours on a CPU); to run the "
                        "harness on the CPU anyway pass --device cpu, with small --shapes / --m, or --preset tiny")
    json_path = args.json or args.out / f"{args.bench_command}.json"
    if json_path.is_dir():
        raise UserError(f"--json: {json_path} is a directory; give a file name")

    if args.bench_command == "layers":
        from quantkit.bench import layers

        config = layers.LayerBenchConfig(
            shapes=common.parse_shapes(args.shapes), ms=common.parse_int_list(args.m, "--m"), device=args.device,
            warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, peers=not args.no_peers,
            compile_peers=args.compile_peers, seed=args.seed, gpu_time=not args.no_gpu_time, rounds=args.rounds,
            floor=not args.no_floor,
            copy_bytes=args.copy_mib * 2**20 if args.copy_mib else None)
        if args.recipes is not None:
            config.recipes = _recipes(args.recipes)
        result = layers.run_layers(config)
        markdown = layers.to_markdown(result)
    else:
        from quantkit.bench import e2e

        config = e2e.E2EConfig(
            preset=args.preset, n_layers=args.layers, device=args.device,
            prefill_len=args.prefill_len, prefill_reps=args.prefill_reps,
            decode_batches=common.parse_int_list(args.batches, "--batches"), prompt_len=args.prompt_len,
            decode_steps=args.decode_steps, graphs=not args.no_graph, fuse_glue=not args.no_fuse_glue,
            compile=args.compile,
            quantize_lm_head=not args.keep_lm_head, seed=args.seed)
        if args.recipes is not None:
            config.recipes = _recipes(args.recipes)
        result = e2e.run_e2e(config)
        markdown = e2e.to_markdown(result)
    return _write_outputs(result, markdown, json_path, plot=not args.no_plot)


def _write_outputs(result, markdown: str, json_path: Path, plot: bool) -> int:
    from quantkit import atomic
    from quantkit.bench import common

    json_path = common.write_json(json_path, result)
    md_path = json_path.with_suffix(".md")
    atomic.write_text(md_path, markdown)
    print()
    print(markdown)
    print(f"wrote {json_path} and {md_path} (benchmark took {result['elapsed_s']:.0f} s)")
    if plot:
        _run_plot(json_path, json_path.with_suffix(".png"), result=result)
    return 0


def _run_plot(json_path: Path, png: Path, result=None) -> int:
    """Draw ``png``; after a benchmark run (``result`` given) a missing matplotlib only skips the chart,
    while ``quantkit bench plot`` without it is an error."""
    from quantkit.bench import common
    from quantkit.bench.plot import PlotUnavailable, plot_result
    from quantkit.cli import UserError

    asked = result is None
    if asked:
        result = common.read_json(json_path)
    try:
        path = plot_result(result, png)
    except PlotUnavailable as exc:
        if asked:
            raise UserError(str(exc)) from None
        print(f"no PNG: {exc}", file=sys.stderr)
        return 0
    print(f"wrote {path}")
    return 0
