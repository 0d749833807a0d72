"""Time and error of each int4 rounding on Llama-shaped layers: ``python -m quantkit.rounding.bench``.

For each N×K (out × in) it draws weights from N(0, 0.02²) in bfloat16, and inputs ``x`` ~ N(0, 1)
[M, K] (``--correlated``: low-rank plus noise, like real activations; the calibration statistics for
``gptq`` come from 2K other inputs of the same distribution),
and reports per method the quantization time (synchronized, after a warm-up) and the output error
``||x Ŵ^T - x W^T|| / ||x W^T||`` in float64. ``minmax`` runs what ``Int4WeightOnlyLinear`` runs by
default (the Triton quantizer on a GPU that has it).
"""
from __future__ import annotations

import argparse
import json
import time

import torch

SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336))
METHODS = ("minmax", "search", "gptq")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _quantizer(method: str, hessian: torch.Tensor | None):
    from quantkit import ops
    from quantkit.rounding import int4_quantizer

    if method == "minmax":
        return lambda w, g: ops.quantize_weight("int4_weight_only", w, g, False, w.dtype)
    quantizer = int4_quantizer(method, hessian)
    return lambda w, g: quantizer(w, g, False, w.dtype)


def _inputs(m: int, k: int, gen: torch.Generator, correlated: bool) -> torch.Tensor:
    if not correlated:
        return torch.randn(m, k, generator=gen)
    # like real activations: a few strong directions, per-feature scales, a little isotropic noise
    g2 = torch.Generator().manual_seed(1234)  # the same directions for calibration and evaluation
    basis = torch.randn(64, k, generator=g2)
    feature_scale = torch.exp(0.7 * torch.randn(k, generator=g2))
    return (torch.randn(m, 64, generator=gen) @ basis + 0.3 * torch.randn(m, k, generator=gen)) * feature_scale


def bench_shape(n: int, k: int, methods=METHODS, group_size: int = 128, tokens: int = 2048, device=None,
                seed: int = 0, correlated: bool = False) -> list[dict]:
    from quantkit.reference.int4 import dequantize_weight_int4

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    gen = torch.Generator(device="cpu").manual_seed(seed)
    w = (torch.randn(n, k, generator=gen) * 0.02).to(device=device, dtype=torch.bfloat16)
    x = _inputs(tokens, k, gen, correlated).to(device=device, dtype=torch.float64)
    y = x @ w.double().t()
    hessian = None
    if "gptq" in methods:
        # twice as many calibration tokens as inputs: fewer leave the statistics rank-deficient
        chunks = max(1, 2 * k // 1024)
        hessian = torch.zeros(k, k, device=device)
        for _ in range(chunks):
            calib = _inputs(1024, k, gen, correlated).to(device)
            hessian.addmm_(calib.t(), calib)
        hessian /= chunks * 1024
    rows = []
    for method in methods:
        small = group_size * 2  # warm-up: kernels, allocator
        _quantizer(method, None if hessian is None else hessian[:small, :small])(w[:8, :small].contiguous(), group_size)
        quantize = _quantizer(method, hessian)
        _sync(device)
        start = time.perf_counter()
        packed, scale, zero = quantize(w, group_size)
        _sync(device)
        seconds = time.perf_counter() - start
        wq = dequantize_weight_int4(packed, scale, zero, group_size, torch.float64)
        err = ((x @ wq.t() - y).norm() / y.norm()).item()
        rows.append({"n": n, "k": k, "method": method, "seconds": seconds, "rel_error": err, "device": str(device)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quantkit.rounding.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=[f"{n}x{k}" for n, k in SHAPES], help="NxK (out x in)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--device", default=None, help="default: cuda when available")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--correlated", action="store_true",
                        help="inputs like real activations (low-rank plus noise, uneven feature scales) instead of "
                             "N(0, 1)")
    parser.add_argument("--json", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    print(f"{'N x K':>13}  {'method':>7}  {'seconds':>8}  {'rel error':>9}  {'vs minmax':>9}")
    for shape in args.shapes:
        n, k = (int(v) for v in shape.lower().split("x"))
        shape_rows = bench_shape(n, k, args.methods, device=args.device, correlated=args.correlated)
        base = next((r["rel_error"] for r in shape_rows if r["method"] == "minmax"), None)
        for r in shape_rows:
            change = f"{100 * (r['rel_error'] / base - 1):+.2f}%" if base else "-"
            print(f"{f'{n} x {k}':>13}  {r['method']:>7}  {r['seconds']:>8.3f}  {r['rel_error']:>9.5f}  {change:>9}",
                  flush=True)
        rows += shape_rows
    if rows:
        print(f"device: {rows[0]['device']}" + (f" ({torch.cuda.get_device_name()})" if torch.cuda.is_available()
                                                 and rows[0]["device"].startswith("cuda") else ""))
    if args.json:
        from quantkit.atomic import write_text

        write_text(args.json, json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
