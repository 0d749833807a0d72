"""``quantkit tune``: time the kernels' candidate configs on this GPU and keep the fastest.

quantkit ships tuned configs for the GPUs it was measured on (the H100 and H200); another GPU of the same
compute capability borrows theirs, and any other GPU runs per-size defaults. This command sweeps every
problem the shipped tables hold (or the ``--shapes`` × ``--m`` given) for each recipe's kernels on the
current GPU (:mod:`quantkit.kernels.tuning`: GPU time from CUDA-graph replay, ties broken by eager time),
writes the sweep to ``--out`` after each problem (``--resume`` continues an interrupted one), and puts
the best configs in the user cache (``$QUANTKIT_CACHE_DIR``, default ``~/.cache/quantkit``), which every
later run on this GPU reads first.
"""
from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

HELP = "time the kernels' configs on this GPU and keep the fastest (for GPUs without shipped tables)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recipes", nargs="+", default=None, metavar="RECIPE",
                   help="the recipes whose kernels to tune (default: every recipe)")
    p.add_argument("--shapes", default=None, metavar="NxK[,NxK...]",
                   help="layer shapes (out x in features) to tune, instead of every problem the shipped tables hold")
    p.add_argument("--m", default=None, metavar="M[,M...]",
                   help="token counts for --shapes (default 1,16,128,1024,4096); each is tuned as its "
                        "power-of-two bucket, whose config every M in it runs")
    p.add_argument("--out", type=Path, default=None,
                   help="the sweep's JSON file (default ./tune-<gpu>.json)")
    p.add_argument("--resume", action="store_true", help="keep the problems --out already holds and time the rest")
    p.add_argument("--no-install", action="store_true",
                   help="only write --out; leave the user cache alone (install later with "
                        "python -m quantkit.kernels.tuning --install FILE)")


def run(args: argparse.Namespace) -> int:
    import torch

    from quantkit.cli import UserError
    from quantkit.recipes import RECIPES

    names = args.recipes or list(RECIPES)
    unknown = [name for name in names if name not in RECIPES]
    if unknown:
        raise UserError(f"unknown recipe {', '.join(unknown)}; quantkit tune knows {', '.join(RECIPES)}")
    if args.m and not args.shapes:
        raise UserError("--m gives the token counts for --shapes: give --shapes too")
    from quantkit.kernels import tuning

    shapes = tuning.parse_shapes(args.shapes) if args.shapes else None  # (ValueError: the CLI prints it)
    ms = tuning.parse_ms(args.m) if args.m else tuning.BENCH_M  # (ValueError: the CLI prints it)
    # configs are kept per power-of-two bucket of M, and an M runs its bucket's: time the bucket itself, once
    rounded = [m for m in dict.fromkeys(ms) if tuning.m_bucket(m) != m]
    if rounded:
        print("quantkit tune: configs are kept per power-of-two M, and an M runs its bucket's: "
              + ", ".join(f"M = {m} is tuned as M = {tuning.m_bucket(m)}" for m in rounded), flush=True)
    ms = tuple(dict.fromkeys(tuning.m_bucket(m) for m in ms))
    # where the results go, checked before minutes of sweeping rather than after
    if args.out is not None:
        _check_out(args.out)
    if not args.no_install:
        cache_dir = tuning.user_cache_dir()
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"the user cache directory {cache_dir} cannot be made ({exc.strerror}); set "
                            f"QUANTKIT_CACHE_DIR, or pass --no-install") from None
        if not os.access(cache_dir, os.W_OK):
            raise UserError(f"the user cache directory {cache_dir} is not writable; set QUANTKIT_CACHE_DIR, or pass "
                            f"--no-install")
    if not torch.cuda.is_available():
        raise UserError("quantkit tune times kernels on a CUDA GPU, and none is visible")
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        raise UserError(f"quantkit tune needs Triton, which does not import here ({exc})") from exc

    out = args.out
    if out is None:  # the default, named after the GPU: checked once the GPU is known
        out = Path(f"tune-{tuning.gpu_file_name()}.json")
        _check_out(out)
    families = [name.replace("-", "_") for name in names]
    done = tuning.resumed_families(out) if args.resume else {}
    # what ran before on the problems swept: the shipped entries (own or borrowed), else the defaults
    before = {family: dict(tuning._shipped(family)) for family in families}
    print(f"quantkit tune: {tuning.gpu_name()}, {', '.join(names)}; the sweep goes to {out}", flush=True)
    data = tuning.sweep_to_file(families, out, shapes or tuning.LLAMA_SHAPES, ms, shipped=shapes is None,
                                done=done)
    for name, family in zip(names, families):
        print(_summary(name, family, data["families"].get(family, {}), before[family]))
    if not args.no_install:
        tuning.install([out])
        print(f"installed in {tuning.user_cache_path()}: later runs on this GPU use these configs first")
    return 0


def _check_out(path: Path) -> None:
    from quantkit.cli import UserError, check_output_file

    check_output_file(path, "--out")
    if not os.access(path.parent, os.W_OK):
        raise UserError(f"--out: directory {path.parent} is not writable")


def _summary(name: str, family: str, rows: dict, shipped: dict) -> str:
    """How the sweep's picks compare with what ran before (the shipped entry, own or borrowed, where one
    exists and was timed), by the sweep's own GPU times."""
    import importlib

    from quantkit.kernels import tuning

    module = importlib.import_module(f"quantkit.kernels.{family}")
    changed, gains = 0, []
    for key, row in rows.items():
        m, n, k = (int(v) for v in key.split(","))
        old = shipped.get(key) or module.default_config(m, n, k)
        if row["config"] == old:
            continue
        changed += 1
        old_ms = tuning.row_config_ms(row, old)
        if old_ms:
            gains.append(1 - row["ms"] / old_ms)
    text = f"{name}: {len(rows)} problems; {changed} now run another config than before"
    if gains:
        text += (f" (by the sweep's GPU times {statistics.median(gains) * 100:+.1f} % median, "
                 f"{max(gains) * 100:+.1f} % at most)")
    return text
