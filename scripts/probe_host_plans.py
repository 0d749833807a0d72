"""Whether each quantized layer's eager call replays a launch plan (kernels/plan.py), what one call costs
the host, and (``--profile``) where that host time goes: cProfile of back-to-back calls of one cell.

    PYTHONPATH=. python scripts/probe_host_plans.py [--cells 4096x4096:1,16,128,1024] [--import torchao gemlite]
        [--profile fp8-block:4096x4096:128]

``--import`` imports packages first (a user's process that has other quantization libraries loaded). Host
µs a call: ``quantkit.bench.common.host_us_per_call``, 7 batches of 200 back-to-back calls.
"""
import argparse
import cProfile
import importlib
import io
import pstats

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", nargs="*", default=["4096x4096:1,16,128,1024"])
    parser.add_argument("--import", dest="imports", nargs="*", default=[])
    parser.add_argument("--profile", nargs="*", default=[])
    args = parser.parse_args()
    for name in args.imports:
        importlib.import_module(name)
    import quantkit
    from quantkit.bench.common import host_us_per_call
    from quantkit.ops import dispatch

    print("imported:", args.imports or "nothing", flush=True)
    torch.manual_seed(0)
    layers = {}
    for cell in args.cells + [p.split(":", 1)[1] for p in args.profile]:
        shape, ms = cell.split(":")
        n, k = map(int, shape.split("x"))
        lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
        torch.nn.init.normal_(lin.weight, std=0.02)
        for recipe in quantkit.recipe_names():
            layer = layers.setdefault((recipe, n, k), quantkit.quantize_linear(lin, recipe))
            for m in map(int, ms.split(",")):
                if cell not in args.cells:
                    continue
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                with torch.no_grad():
                    for _ in range(3):
                        layer(x)
                    t = host_us_per_call(lambda: layer(x), calls=200, batches=7)
                    tb = host_us_per_call(lambda: torch.nn.functional.linear(x, lin.weight), calls=200, batches=7)
                states = set()
                for (family, function, _), fn in dispatch._RESOLVED.items():
                    if family != recipe.replace("-", "_") or function != "linear":
                        continue
                    for key, plan in getattr(fn, "plans", {}).items():
                        if key[0] == x.shape:
                            states.add(plan if isinstance(plan, str) else "planned")
                print(f"{recipe:18s} N={n} K={k} M={m:5d}: host {t:6.1f} us a call (bf16 {tb:5.1f}); plans for this "
                      f"x shape: {sorted(states)}", flush=True)
    for spec in args.profile:
        recipe, shape, m = spec.split(":")
        n, k = map(int, shape.split("x"))
        layer = layers[(recipe, n, k)]
        x = torch.randn(int(m), k, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            for _ in range(10):
                layer(x)
            torch.cuda.synchronize()
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(300):
                layer(x)
            prof.disable()
            torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
        print(f"--- cProfile of 300 calls, {spec}\n" + "\n".join(s.getvalue().splitlines()[:40]), flush=True)


if __name__ == "__main__":
    main()
