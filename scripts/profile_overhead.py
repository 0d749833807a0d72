"""Host-side (CPU) cost of one quantized forward, per recipe: where eager decode time goes when the
GPU kernel is shorter than the Python that launches it.

    python scripts/profile_overhead.py [--m 1,16,128] [--profile [--profile-m 16]] [--recipes R,...]

For each recipe and M it prints the CPU time per call of the layer's forward (queue kept short by
synchronizing every 20 calls), of the kernel module's ``linear`` called directly, and the GPU time
(do_bench median); ``--profile`` adds a cProfile of 200 layer calls.
"""
import argparse
import cProfile
import importlib
import pstats
import time

import torch
import triton.testing

import quantkit


def cpu_us_per_call(fn, calls=200, chunk=20):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    total = 0.0
    for _ in range(calls // chunk):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(chunk):
            fn()
        total += time.perf_counter() - start
    torch.cuda.synchronize()
    return total / calls * 1e6



def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", default="1,16,128")
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-m", default="16", help="the M values --profile profiles (comma-separated)")
    parser.add_argument("--recipes", default=None, help="comma-separated recipes (default: every one)")
    args = parser.parse_args()
    torch.manual_seed(0)
    lin = torch.nn.Linear(args.k, args.n, bias=False, device="cuda", dtype=torch.bfloat16)
    torch.nn.init.normal_(lin.weight, std=0.02)
    print(f"N={args.n} K={args.k}; triton launch hooks installed: "
          f"{len(triton.knobs.runtime.launch_enter_hook.calls) + len(triton.knobs.runtime.launch_exit_hook.calls)}")
    for recipe in (args.recipes.split(",") if args.recipes else quantkit.recipe_names()):
        layer = quantkit.quantize_linear(lin, recipe)
        for m in map(int, args.m.split(",")):
            x = torch.randn(m, args.k, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                fwd = lambda: layer(x)  # noqa: E731
                cpu_layer = cpu_us_per_call(fwd)
                gpu = triton.testing.do_bench(fwd, warmup=25, rep=100, return_mode="median") * 1e3
                gpu_graph = float("nan")
                try:
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        layer(x)
                    gpu_graph = triton.testing.do_bench(g.replay, warmup=25, rep=100, return_mode="median") * 1e3
                except Exception as exc:  # noqa: BLE001
                    print(f"   graph capture failed: {exc.__class__.__name__}: {exc}")
            family = recipe.replace("-", "_")
            module = importlib.import_module(f"quantkit.kernels.{family}")
            bufs = layer.kernel_args()
            direct = lambda: module.linear(x, *bufs)  # noqa: E731
            with torch.inference_mode():
                inf = triton.testing.do_bench(fwd, warmup=25, rep=100, return_mode="median") * 1e3
            kern = triton.testing.do_bench(direct, warmup=25, rep=100, return_mode="median") * 1e3
            cpu_direct = cpu_us_per_call(direct)
            print(f"{recipe:18s} M={m:<5d} layer CPU {cpu_layer:7.1f} us/call (kernel call {cpu_direct:6.1f})  "
                  f"do_bench layer {gpu:7.1f} us, under inference_mode {inf:7.1f}, kernel call {kern:7.1f}  "
                  f"graph replay {gpu_graph:7.1f} us", flush=True)
            if args.profile and m in map(int, args.profile_m.split(",")):
                prof = cProfile.Profile()
                with torch.no_grad():
                    prof.enable()
                    for _ in range(200):
                        layer(x)
                    prof.disable()
                torch.cuda.synchronize()
                pstats.Stats(prof).sort_stats("tottime").print_stats(25)


def report_launch_caches():
    """Compiled variants per cached kernel: more than a handful means the launch key is unstable."""
    from quantkit.kernels.launch import CachedKernel

    for family in ("fp8_block", "int8_dynamic", "int8_weight_only", "int4_weight_only"):
        module = importlib.import_module(f"quantkit.kernels.{family}")
        sizes = {name: (len(v._compiled), v._fast) for name, v in vars(module).items() if isinstance(v, CachedKernel)}
        print(family, sizes)


if __name__ == "__main__":
    main()
    report_launch_caches()
