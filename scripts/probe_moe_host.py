"""Where an eager MoE block call's host time goes: wall µs per call against its CUDA graph's replay, and a profile.

    python scripts/probe_moe_host.py [--shape qwen3-30b-a3b] [--tokens 1] [--recipes int8-weight-only,...]

Per recipe: the eager call (host and GPU, back to back), the same call replayed from a CUDA graph (GPU only), and
cProfile's functions by own time over 300 eager calls (the host side, Python's view of it).
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys

import torch
from torch import nn

sys.path.insert(0, "scripts")
from bench_moe import capture_graph, make_experts, routing, time_call  # noqa: E402

import quantkit  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="qwen3-30b-a3b")
    parser.add_argument("--tokens", type=int, default=1)
    parser.add_argument("--recipes", default="int8-weight-only,int4-weight-only,int8-dynamic,fp8-block")
    parser.add_argument("--top", type=int, default=18)
    args = parser.parse_args(argv)
    grouped, top_k = make_experts(args.shape, "grouped_mm")
    x, index, weights = routing(args.tokens, grouped.gate_up_proj.shape[0], top_k, grouped.gate_up_proj.shape[-1])
    with torch.no_grad():
        eager = time_call(lambda: grouped(x, index, weights), 5)
        replay = time_call(capture_graph(lambda: grouped(x, index, weights)).replay, 5)
        print(f"{args.shape} T={args.tokens} bf16 grouped_mm: eager {eager:.1f} µs, graph {replay:.1f} µs", flush=True)
        for recipe in args.recipes.split(","):
            holder = nn.Sequential()
            holder.add_module("experts", make_experts(args.shape, "eager")[0])
            quantkit.quantize_(holder, recipe)
            block = holder.experts
            eager = time_call(lambda: block(x, index, weights), 5)
            replay = time_call(capture_graph(lambda: block(x, index, weights)).replay, 5)
            print(f"\n{recipe}: eager {eager:.1f} µs, graph {replay:.1f} µs", flush=True)
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(300):
                block(x, index, weights)
            torch.cuda.synchronize()
            profile.disable()
            pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)
            del holder, block
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
