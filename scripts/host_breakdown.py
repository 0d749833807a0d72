"""Where the host time of an eager quantized forward goes, measured several times so machine noise
shows up as spread rather than as a cost.

    python scripts/host_breakdown.py [--cells 4096x4096:1,128 ...]

For each recipe and cell it prints host µs per call (min / median / max of 7 batches of 200 calls,
no synchronization inside a batch) of: the layer, the kernel module's ``linear``, and reference
points (an empty Python call, ``torch.empty``, bf16 ``F.linear``, a trivial Triton kernel through
Triton's launcher and through ``quantkit.kernels.launch.cached``). For a cProfile of the layer
calls: ``scripts/profile_overhead.py --profile``.
"""
import argparse
import importlib
import statistics
import time

import torch
import triton
import triton.language as tl

import quantkit
from quantkit.kernels.launch import cached


@triton.jit
def _touch_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


_touch_fast = cached(_touch_kernel)


def host_us(fn, calls=200, repeats=7):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) / calls * 1e6)
    torch.cuda.synchronize()
    return f"{min(runs):6.1f} / {statistics.median(runs):6.1f} / {max(runs):6.1f}"



def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", nargs="*", default=["4096x4096:1,16,128,1024", "4096x14336:1"])
    args = parser.parse_args()
    a = torch.zeros(4096, device="cuda")
    b = torch.empty_like(a)
    print("reference points (host µs per call, min / median / max)")
    print("  python no-op          ", host_us(lambda: None))
    print("  torch.empty 16x4096   ", host_us(lambda: torch.empty(16, 4096, device="cuda", dtype=torch.bfloat16)))
    print("  triton launcher        ", host_us(lambda: _touch_kernel[(4,)](a, b, 4096, BLOCK=1024)))
    print("  quantkit cached launch ", host_us(lambda: _touch_fast[(4,)](a, b, 4096, BLOCK=1024)))
    torch.manual_seed(0)
    for cell in args.cells:
        shape, ms = cell.split(":")
        n, k = map(int, shape.split("x"))
        lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
        torch.nn.init.normal_(lin.weight, std=0.02)
        layers = {r: quantkit.quantize_linear(lin, r) for r in quantkit.recipe_names()}
        for m in map(int, ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                print(f"N={n} K={k} M={m}")
                print(f"  bf16 F.linear          {host_us(lambda: torch.nn.functional.linear(x, lin.weight))}")
                for recipe, layer in layers.items():
                    module = importlib.import_module(f"quantkit.kernels.{recipe.replace('-', '_')}")
                    bufs = layer.kernel_args()
                    print(f"  {recipe:18s} layer {host_us(lambda: layer(x))}   kernel linear "
                          f"{host_us(lambda: module.linear(x, *bufs))}", flush=True)


if __name__ == "__main__":
    main()
