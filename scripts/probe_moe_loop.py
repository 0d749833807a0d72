"""Where the per-expert loop's time goes at many rows an expert: CUDA kernel times of one MoE block's experts call
under torch.profiler, against transformers' bf16 grouped_mm on the same routing.

    python scripts/probe_moe_loop.py [--shape mixtral-8x7b] [--tokens 2048] [--recipes int8-weight-only,...]
"""
from __future__ import annotations

import argparse
import sys

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, "scripts")
from bench_moe import make_experts, routing, time_call  # noqa: E402

import quantkit  # noqa: E402


def show(fn, label: str, rows: int) -> None:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    print(f"\n== {label}: {time_call(fn, 3):.1f} µs a call (wall); CUDA kernels over 5 calls:")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows, max_name_column_width=70))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="mixtral-8x7b")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--recipes", default="int8-weight-only,int4-weight-only")
    parser.add_argument("--rows", type=int, default=14)
    args = parser.parse_args(argv)
    grouped, top_k = make_experts(args.shape, "grouped_mm")
    x, index, weights = routing(args.tokens, grouped.gate_up_proj.shape[0], top_k, grouped.gate_up_proj.shape[-1])
    print("rows an expert:", torch.bincount(index.reshape(-1), minlength=grouped.gate_up_proj.shape[0]).tolist())
    with torch.no_grad():
        show(lambda: grouped(x, index, weights), "bf16 grouped_mm", args.rows)
        del grouped
        for recipe in args.recipes.split(","):
            holder = nn.Sequential()
            holder.add_module("experts", make_experts(args.shape, "eager")[0])
            quantkit.quantize_(holder, recipe)
            block = holder.experts
            show(lambda: block(x, index, weights), recipe, args.rows)
            del holder, block
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
