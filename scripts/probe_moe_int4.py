"""Grouped MoE kernels before and after a change, and a small config grid, timed from CUDA graphs.

    python scripts/probe_moe_int4.py BEFORE.py [--recipe int4-weight-only] [--cells qwen3-30b-a3b:2048,...] [--grid]
                                     [--swap] [--no-before] [--rounds 5]

BEFORE.py is an earlier ``quantkit/kernels/moe.py`` (loaded as its own module beside the current one). Per cell (a
block shape of scripts/bench_moe.py and a token count): bf16 grouped_mm's graph, the earlier kernels' default, the
current default, and with ``--grid`` a few launch configs of the current kernels; GPU µs per block call (median of
rounds of 20 replays) and each output's largest difference from the current default's, relative to its largest
value.
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import sys

import torch
from torch import nn

sys.path.insert(0, "scripts")
from bench_moe import make_experts, routing  # noqa: E402
from probe_moe_configs import timed  # noqa: E402

import quantkit  # noqa: E402
from quantkit.kernels import moe  # noqa: E402


def load(path: str):
    spec = importlib.util.spec_from_file_location("moe_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("before")
    parser.add_argument("--cells", default="qwen3-30b-a3b:1,qwen3-30b-a3b:16,qwen3-30b-a3b:256,qwen3-30b-a3b:2048,"
                                           "mixtral-8x7b:1,mixtral-8x7b:16,mixtral-8x7b:256,mixtral-8x7b:2048")
    parser.add_argument("--recipe", default="int4-weight-only")
    parser.add_argument("--grid", action="store_true")
    parser.add_argument("--swap", action="store_true", help="the grid with SWAP (acc^T = W x^T) in place of the plain kernels")
    parser.add_argument("--no-before", action="store_true", help="skip the earlier kernels")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    before = load(args.before)
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    built = {}
    for cell in args.cells.split(","):
        shape, tokens = cell.split(":")
        tokens = int(tokens)
        if shape not in built:
            built.clear()
            torch.cuda.empty_cache()
            grouped, top_k = make_experts(shape, "grouped_mm")
            holder = nn.Sequential()
            holder.add_module("experts", make_experts(shape, "eager")[0])
            holder.experts.load_state_dict(grouped.state_dict())
            quantkit.quantize_(holder, args.recipe)
            built[shape] = (grouped, holder.experts, top_k)
        grouped, experts, top_k = built[shape]
        stacks = experts._stacks()
        fmt, group, scale_fmt = experts._stack_state[0]
        x, index, weights = routing(tokens, grouped.gate_up_proj.shape[0], top_k, grouped.gate_up_proj.shape[-1])

        def run(module=moe, configs=None):
            return module.experts_forward(x, index, weights, fmt, stacks["gate"], stacks["up"], stacks["down"], group,
                                          scale_fmt, configs)

        with torch.no_grad():
            base = run().float()
            scale = base.abs().max().item()
            bf16 = timed(lambda: grouped(x, index, weights), args.rounds)
            old = bf16 if args.no_before else timed(lambda: run(before), args.rounds)
            old_diff = 0.0 if args.no_before else (run(before).float() - base).abs().max().item() / scale
            new = timed(run, args.rounds)
            print(f"{shape} T={tokens} {args.recipe}: bf16 grouped_mm {bf16:.1f} µs | before {old:.1f} µs "
                  f"({bf16 / old:.2f}x, diff {old_diff:.1e}) | now {new:.1f} µs ({bf16 / new:.2f}x)", flush=True)
            if not args.grid:
                continue
            rows = moe.rows_per_expert(tokens * top_k, grouped.gate_up_proj.shape[0])
            block_m = moe._config(tokens * top_k, grouped.gate_up_proj.shape[0], moe.FORMATS[fmt], group, True,
                                  2)["BLOCK_M"]
            results = []
            swaps = [True] if args.swap else [False]
            stage_list = [3] if args.swap else [3, 4]
            for swap, bn_up, bn_down, warps, stages in itertools.product(swaps, [64, 128], [64, 128], [4, 8],
                                                                          stage_list):
                if block_m == 16 and warps == 8:
                    continue
                up = dict(BLOCK_M=block_m, BLOCK_N=bn_up, BLOCK_K=128, num_warps=warps, num_stages=stages, SWAP=swap)
                down = dict(up, BLOCK_N=bn_down)
                try:
                    y = run(configs=(up, down)).float()
                    us = timed(lambda: run(configs=(up, down)), args.rounds)
                except Exception as exc:  # noqa: BLE001 - out of shared memory and the like
                    print(f"  up {bn_up} down {bn_down} w{warps} s{stages}: {type(exc).__name__}", flush=True)
                    continue
                diff = (y - base).abs().max().item() / scale
                results.append((us, up, down))
                print(f"  {us:8.1f} µs ({bf16 / us:.2f}x)  BM {block_m} up {bn_up} down {bn_down} w{warps} "
                      f"s{stages}{' SWAP' if swap else ''}  diff {diff:.1e}  (rows/expert {rows:.0f})", flush=True)
            results.sort(key=lambda r: r[0])
            print("  best:", [f"{r[0]:.1f} µs {r[1]} / {r[2]}" for r in results[:3]], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
