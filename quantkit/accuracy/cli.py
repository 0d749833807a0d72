"""``quantkit compare``: how far each recipe moves a Hugging Face model's outputs, per layer and overall.

    quantkit compare MODEL_DIR --text sentences.txt --recipe int4-weight-only fp8-block
    quantkit compare MODEL_DIR --text eval.txt --recipe my_recipe.toml --calibration calib.txt \\
        --json report.json --csv report.csv --plot errors.png
"""
from __future__ import annotations

import sys

HELP = "compare recipes on a model: per-layer SQNR/relative error, output cosine, perplexity (table/JSON/CSV/PNG)"

_DTYPES = ("float32", "bfloat16", "float16")


def add_arguments(parser) -> None:
    parser.add_argument("model", help="a local Hugging Face model directory (config.json, weights, tokenizer)")
    parser.add_argument("--text", required=True,
                        help="text file to run the models on: one sentence per line for an embedding model; "
                             "for a causal LM the whole text is scored (perplexity, top-1 agreement)")
    parser.add_argument("-r", "--recipe", dest="recipes", nargs="+", action="extend", metavar="RECIPE",
                        help="recipe names or recipe files (default: every registered recipe)")
    parser.add_argument("--calibration", metavar="FILE",
                        help="text file for calibrated recipes (rounding = \"gptq\"); use other text than --text")
    parser.add_argument("--ignore", nargs="+", action="extend", default=[], metavar="PATTERN",
                        help="module patterns to keep in high precision in every recipe (e.g. lm_head)")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--dtype", choices=_DTYPES, default="float32", help="model dtype (default float32)")
    parser.add_argument("--batch-size", type=int, default=16, help="sentences or token windows per batch (16)")
    parser.add_argument("--max-length", type=int, default=None,
                        help="tokens per sentence (default 256) or per causal-LM window (default 512)")
    parser.add_argument("--json", metavar="PATH", help="write the full report as JSON ('-' for stdout)")
    parser.add_argument("--csv", metavar="PATH", help="write per-layer and per-model rows as CSV ('-' for stdout)")
    parser.add_argument("--plot", metavar="PNG", help="write a plot of the error per layer per recipe")
    parser.add_argument("--no-layers", action="store_true", help="print only the whole-model table")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args) -> int:
    import torch

    from quantkit import atomic
    from quantkit.accuracy.compare import compare
    from quantkit.cli import check_device, check_output_file
    from quantkit.recipes import recipe_names

    if args.device is not None:
        check_device(args.device)
    if args.batch_size <= 0:
        raise ValueError(f"--batch-size must be positive, got {args.batch_size}")
    if args.max_length is not None and args.max_length < 2:
        raise ValueError(f"--max-length must be at least 2, got {args.max_length}")
    for path, what in ((args.json, "json"), (args.csv, "csv"), (args.plot, "plot")):
        if path and path != "-":
            check_output_file(path, f"--{what}")
    if args.plot and not args.plot.lower().endswith(".png"):
        raise ValueError(f"--plot writes a PNG: give a file name ending in .png, got {args.plot}")
    if args.plot:
        try:
            import matplotlib  # noqa: F401 - checked now rather than after the comparison
        except ImportError:
            raise ValueError("--plot needs matplotlib (pip install 'quantkit[plot]')") from None
    if args.json == "-" and args.csv == "-":
        raise ValueError("--json and --csv cannot both go to stdout")
    recipes = args.recipes or recipe_names()
    report = compare(args.model, recipes, text=args.text, calibration=args.calibration, ignore=args.ignore,
                     device=args.device, dtype=getattr(torch, args.dtype), batch_size=args.batch_size,
                     max_length=args.max_length, progress=not args.no_progress)
    to_stdout = args.json == "-" or args.csv == "-"
    print(report.table(layers=not args.no_layers), file=sys.stderr if to_stdout else sys.stdout)
    if args.json:
        text = report.to_json()
        if args.json == "-":
            print(text)
        else:
            atomic.write_text(args.json, text + "\n")
    if args.csv:
        if args.csv == "-":
            sys.stdout.write(report.to_csv())
        else:
            atomic.write_text(args.csv, report.to_csv())
    if args.plot:
        report.plot(args.plot)
    return 0
