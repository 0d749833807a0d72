"""``quantkit convert IN OUT --recipe NAME|FILE``: quantize (or dequantize) a checkpoint, streaming."""
from __future__ import annotations

import argparse

import torch

HELP = "convert a Hugging Face checkpoint directory to a quantized one (or back with --dequantize), streaming"

_DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16,
           "float32": torch.float32, "fp32": torch.float32}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from quantkit.checkpoint.formats import FORMATS
    from quantkit.recipes import recipe_names

    parser.add_argument("input", help="model directory: config.json + *.safetensors (+ model.safetensors.index.json)")
    parser.add_argument("output", help="output directory (created; must not exist unless --overwrite)")
    parser.add_argument("--recipe", help=f"recipe name ({', '.join(recipe_names())}) or a .toml/.json recipe file; "
                                         f"optional for an already-quantized input (format change only)")
    parser.add_argument("--ignore", action="append", default=[], metavar="PATTERN",
                        help="keep matching modules in high precision (glob like 'lm_head', '*.gate', or 're:REGEX'); "
                             "repeatable")
    parser.add_argument("--override", action="append", default=[], metavar="PATTERN=RECIPE",
                        help="use RECIPE (a name, a recipe file or 'skip') for modules matching PATTERN; repeatable, "
                             "first match wins")
    parser.add_argument("--format", choices=FORMATS, default=FORMATS[0],
                        help="output layout: compressed-tensors (vLLM, transformers; default) or fp8 (DeepSeek-V3 / "
                             "Hugging Face block fp8, fp8-block recipe only)")
    parser.add_argument("--dequantize", action="store_true",
                        help="turn an fp8 / int8 / int4 checkpoint (quantkit's or another tool's) back into --dtype "
                             "weights and drop its quantization_config")
    parser.add_argument("--dtype", choices=sorted(_DTYPES), default="bfloat16",
                        help="dtype of dequantized weights (default bfloat16)")
    parser.add_argument("--max-shard-size", default="5GB", help="largest output shard, e.g. 5GB, 500MB (default 5GB)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    parser.add_argument("--device", default=None, help="where to compute: cuda, cuda:1, cpu (default: cuda if available)")
    parser.add_argument("--no-architecture", action="store_true",
                        help="find Linear weights by name only, without building the architecture with transformers")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def _overrides(items: list[str]) -> dict[str, str]:
    from quantkit.cli import UserError

    out = {}
    for item in items:
        pattern, sep, recipe = item.partition("=")
        if not sep or not pattern or not recipe:
            raise UserError(f"--override {item!r}: expected PATTERN=RECIPE, e.g. '*.down_proj=int8-weight-only'")
        out[pattern] = recipe
    return out


def run(args: argparse.Namespace) -> int:
    from quantkit.checkpoint.convert import convert_checkpoint
    from quantkit.cli import UserError, check_device

    if args.device is not None:
        check_device(args.device)
    if args.dequantize and (args.recipe or args.override or args.ignore):
        raise UserError("--dequantize takes no --recipe, --override or --ignore")
    report = convert_checkpoint(
        args.input, args.output, args.recipe, ignore=args.ignore, overrides=_overrides(args.override),
        format=args.format, dequantize=args.dequantize, dtype=_DTYPES[args.dtype],
        max_shard_size=args.max_shard_size, overwrite=args.overwrite, device=args.device,
        progress=not args.no_progress, use_architecture=not args.no_architecture)
    print(report.summary())
    return 0
