"""Launch configs of the grouped MoE kernels (quantkit.kernels.moe) on one block and token count, timed from CUDA graphs.

    python scripts/probe_moe_configs.py RECIPE SHAPE TOKENS [--rounds 5]

SHAPE is one of scripts/bench_moe.py's (qwen3-30b-a3b, mixtral-8x7b). Each row: the gate / up and the down kernel's
config (BLOCK_M shared), the GPU µs of the block's experts call (median of rounds of 20 replays), and its output's
largest difference from the default config's (the configs change tiling, not the arithmetic's order within a dot
step, so small).
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys

import torch
from torch import nn

sys.path.insert(0, "scripts")
from bench_moe import SHAPES, capture_graph, make_experts, routing  # noqa: E402

import quantkit  # noqa: E402
from quantkit.kernels import moe  # noqa: E402


def timed(fn, rounds: int) -> float:
    fn()
    graph = capture_graph(fn)
    out = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end) * 1000 / 20)
    return statistics.median(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe")
    parser.add_argument("shape", choices=list(SHAPES))
    parser.add_argument("tokens", type=int)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    fused, top_k = make_experts(args.shape, "eager")
    holder = nn.Sequential()
    holder.add_module("experts", fused)
    quantkit.quantize_(holder, args.recipe)
    experts = holder.experts
    stacks = experts._stacks()
    fmt, group, scale_fmt = experts._stack_state[0]
    hidden = fused.gate_up_proj.shape[-1]
    x, index, weights = routing(args.tokens, fused.gate_up_proj.shape[0], top_k, hidden)

    def run(configs=None):
        return moe.experts_forward(x, index, weights, fmt, stacks["gate"], stacks["up"], stacks["down"], group,
                                   scale_fmt, configs)

    with torch.no_grad():
        base = run().float()
        base_us = timed(run, args.rounds)
        print(f"{args.recipe} {args.shape} T={args.tokens}: default {base_us:.1f} µs", flush=True)
        rows = moe.rows_per_expert(args.tokens * top_k, fused.gate_up_proj.shape[0])
        block_ms = [16] if rows <= 16 else [32, 64] if rows <= 64 else [64, 128]
        block_ks = [64, 128] if fmt in ("int4-weight-only", "int8-weight-only", "int8-dynamic") else [128]
        results = []
        for bm, bn_up, bn_down, bk in itertools.product(block_ms, [32, 64, 128], [64, 128], block_ks):
            if bm * bn_up * 2 > 128 * 128:
                continue
            warps, stages = (8 if bm * bn_down >= 128 * 64 else 4), 3
            up = dict(BLOCK_M=bm, BLOCK_N=bn_up, BLOCK_K=bk, num_warps=warps, num_stages=stages)
            down = dict(BLOCK_M=bm, BLOCK_N=bn_down, BLOCK_K=bk, num_warps=warps, num_stages=stages)
            try:
                y = run((up, down)).float()
                us = timed(lambda: run((up, down)), args.rounds)
            except Exception as exc:  # noqa: BLE001 - out of shared memory and the like
                print(f"  {up} / {down}: {type(exc).__name__}", flush=True)
                continue
            diff = (y - base).abs().max().item() / base.abs().max().item()
            results.append((us, up, down, diff))
            print(f"  {us:8.1f} µs  up {bn_up}x{bk} down {bn_down}  BM {bm} w{warps} s{stages}  diff {diff:.1e}",
                  flush=True)
        results.sort(key=lambda r: r[0])
        print("best:", [f"{r[0]:.1f} µs {r[1]} / {r[2]}" for r in results[:3]], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
