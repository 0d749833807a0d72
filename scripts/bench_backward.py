"""Training through a frozen quantized layer: the input gradient's cost against bf16, per layer.

For each recipe, issue shape (N×K) and M, under PERFORMANCE.md's timer (``triton.testing.do_bench``, L2
cleared before each call, median), eager:
- ``bwd``: the backward alone (``torch.autograd.grad`` on a kept graph): the weight dequantized by the
  family's Triton kernel, then ``grad @ W`` (bf16: ``grad @ W`` on the bf16 weight, ``nn.Linear``'s backward);
- ``fwd+bwd``: ``torch.autograd.grad(layer(x), x, grad)``, x requiring grad, the weight frozen;
- ``peak MB``: the most memory the fwd+bwd step allocated beyond its inputs (the dequantized weight is the
  transient a quantized layer adds).

    PYTHONPATH=. python scripts/bench_backward.py [--shapes 4096x4096,...] [--m 128,1024,4096] [--out F.md]
"""
import argparse
import statistics

import torch
from torch import nn

import quantkit
from quantkit.bench.common import environment, environment_lines, markdown_table, measure_ms, parse_int_list, \
    parse_shapes

RECIPES = ("fp8-block", "int8-dynamic", "int8-weight-only", "int4-weight-only")


def _peak_mb(fn) -> float:
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def _cell(layer, m: int, rounds: int) -> dict:
    k = layer.in_features
    x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    grad = torch.randn(m, layer.out_features, dtype=torch.bfloat16, device="cuda")
    y = layer(x)
    bwd = lambda: torch.autograd.grad(y, x, grad, retain_graph=True)  # noqa: E731
    step = lambda: torch.autograd.grad(layer(x), x, grad)  # noqa: E731
    bwd(), step()  # compile, tune
    times = {"bwd": [], "fwd+bwd": []}
    for _ in range(rounds):
        times["bwd"].append(measure_ms(bwd, "cuda"))
        times["fwd+bwd"].append(measure_ms(step, "cuda"))
    out = {key: statistics.median(v) for key, v in times.items()}
    out["peak MB"] = _peak_mb(step)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="4096x4096,14336x4096,4096x14336", help="N×K list")
    p.add_argument("--m", default="128,1024,4096", help="rows of x")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", help="also write the markdown here")
    args = p.parse_args()
    shapes, ms = parse_shapes(args.shapes), parse_int_list(args.m, "--m")
    rows = []
    for n, k in shapes:
        torch.manual_seed(0)
        lin = nn.Linear(k, n, bias=False, dtype=torch.bfloat16, device="cuda").requires_grad_(False)
        layers = {"bf16": lin} | {r: quantkit.quantize_linear(lin, r) for r in RECIPES}
        for m in ms:
            cells = {name: _cell(layer, m, args.rounds) for name, layer in layers.items()}
            base = cells["bf16"]
            for name, c in cells.items():
                rows.append([f"{n}x{k}", m, name, f"{c['bwd'] * 1e3:.1f}", f"{base['bwd'] / c['bwd']:.2f}x",
                             f"{c['fwd+bwd'] * 1e3:.1f}", f"{base['fwd+bwd'] / c['fwd+bwd']:.2f}x",
                             f"{c['peak MB']:.0f}"])
            print(f"{n}x{k} M={m}: " + ", ".join(f"{name} {c['fwd+bwd'] * 1e3:.1f} µs" for name, c in cells.items()),
                  flush=True)
        del layers, lin
        torch.cuda.empty_cache()
    table = markdown_table(["N×K", "M", "layer", "bwd µs", "bwd vs bf16", "fwd+bwd µs", "fwd+bwd vs bf16",
                            "peak MB"], rows)
    text = "\n".join(environment_lines(environment("cuda"))) + "\n\n" + table + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
