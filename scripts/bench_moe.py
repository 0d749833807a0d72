"""One MoE block's experts, quantized by quantkit, against transformers' bf16 experts on the same GPU.

    python scripts/bench_moe.py [--shapes qwen3-30b-a3b,mixtral-8x7b] [--tokens 1,16,256,2048] [--rounds 3]
                                [--recipes fp8-block,...] [--json out.json]

The module timed is the experts call of one block, ``experts(hidden [T, H], top_k_index [T, k], top_k_weights [T, k])``,
with each token routed to k distinct experts drawn at random (the same routing for every variant):
- ``bf16 eager``: transformers' fused experts, its loop over the experts hit (``_experts_implementation="eager"``);
- ``bf16 grouped_mm``: the same weights through ``torch._grouped_mm`` (``"grouped_mm"``), transformers' fast path;
- each recipe: quantkit's split experts as the module dispatches them: the grouped kernels of quantkit.kernels.moe
  (align, then two launches), or from 256 rows an expert one quantized linear call per expert projection, the
  experts sorted once (the weight-only recipes also as ``(loop)``, always that way); ``(graph)``: the grouped
  kernels replayed from a CUDA graph (the GPU time without the host's).

Each figure is wall time per call (host and GPU: the loop synchronizes once a call to learn which experts were hit),
the median of ``--rounds`` rounds of back-to-back calls; the error is ‖y − y_bf16‖ / ‖y_bf16‖ against bf16 eager.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from torch import nn

SHAPES = {
    # name: (transformers module path, experts class, config class, config fields, top-k)
    "qwen3-30b-a3b": ("qwen3_moe", "Qwen3MoeExperts", "Qwen3MoeConfig",
                      dict(hidden_size=2048, moe_intermediate_size=768, num_experts=128), 8),
    "mixtral-8x7b": ("mixtral", "MixtralExperts", "MixtralConfig",
                     dict(hidden_size=4096, intermediate_size=14336, num_local_experts=8), 2),
}
RECIPES = ["fp8-block", "int8-dynamic", "int8-weight-only", "int4-weight-only"]


def make_experts(shape: str, implementation: str):
    import importlib

    import transformers

    package, cls, config_cls, fields, top_k = SHAPES[shape]
    config = getattr(transformers, config_cls)(**fields, num_experts_per_tok=top_k)
    config._experts_implementation = implementation
    module = getattr(importlib.import_module(f"transformers.models.{package}.modeling_{package}"), cls)
    with torch.device("cuda"):
        experts = module(config).to(torch.bfloat16)
    torch.manual_seed(0)
    nn.init.normal_(experts.gate_up_proj, std=0.02)
    nn.init.normal_(experts.down_proj, std=0.02)
    return experts, top_k


def routing(tokens: int, experts: int, top_k: int, hidden: int):
    g = torch.Generator(device="cuda").manual_seed(tokens)
    scores = torch.randn(tokens, experts, device="cuda", generator=g)
    weights, index = torch.topk(torch.softmax(scores, dim=-1), top_k, dim=-1)
    x = torch.randn(tokens, hidden, device="cuda", generator=g).bfloat16()
    return x, index, (weights / weights.sum(-1, keepdim=True)).bfloat16()


def time_call(fn, rounds: int, budget_s: float = 0.25) -> float:
    """Median over rounds of the wall µs per call, back to back."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    once = max(time.perf_counter() - start, 1e-6)
    calls = max(3, min(200, int(budget_s / once)))
    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(out)


class _Loop(nn.Module):
    def __init__(self, experts):
        super().__init__()
        self.experts = experts

    def forward(self, x, index, weights):
        return self.experts.forward_loop(x, index, weights)


def capture_graph(fn) -> torch.cuda.CUDAGraph:
    """A CUDA graph of one ``fn()`` call, after a warm-up call on a side stream (as capture requires)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


class _Graph(nn.Module):
    def __init__(self, experts):
        super().__init__()
        self.experts = experts

    def forward(self, x, index, weights):
        return self.experts(x, index, weights)

    def capture(self, x, index, weights) -> torch.cuda.CUDAGraph:
        return capture_graph(lambda: self.experts(x, index, weights))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--tokens", default="1,16,256,2048")
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    import quantkit
    from quantkit.bench.common import module_nbytes

    rows = []
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, quantkit {quantkit.__version__}", flush=True)
    for shape in args.shapes.split(","):
        eager, top_k = make_experts(shape, "eager")
        grouped, _ = make_experts(shape, "grouped_mm")
        grouped.load_state_dict(eager.state_dict())
        variants = {"bf16 eager": eager, "bf16 grouped_mm": grouped, "bf16 grouped_mm (graph)": _Graph(grouped)}
        for recipe in args.recipes.split(","):
            holder = nn.Sequential()
            holder.add_module("experts", eager)  # quantize_ splits it into views; `eager` itself is not changed
            quantkit.quantize_(holder, recipe)
            variants[recipe] = holder.experts
        for recipe in [r for r in args.recipes.split(",") if r.endswith("weight-only")]:
            # the same layers through the reference loop (one layer call per expert projection), for comparison
            variants[f"{recipe} (loop)"] = _Loop(variants[recipe])
            # the grouped kernels replayed from a CUDA graph: their GPU time, without the host's
            variants[f"{recipe} (graph)"] = _Graph(variants[recipe])
        sizes = {name: module_nbytes(m) for name, m in variants.items()}
        hidden = eager.gate_up_proj.shape[-1]
        print(f"\n{shape}: {eager.gate_up_proj.shape[0]} experts, {hidden} -> {eager.gate_up_proj.shape[1] // 2} "
              f"-> {hidden}, top-{top_k}; weights {sizes['bf16 eager'] / 2**20:.0f} MiB in bf16", flush=True)
        print(f"{'tokens':>6}  {'variant':<26} {'µs/call':>10} {'vs eager':>9} {'vs grouped':>11} {'rel err':>9} "
              f"{'MiB':>7}")
        for tokens in [int(t) for t in args.tokens.split(",")]:
            x, index, weights = routing(tokens, eager.gate_up_proj.shape[0], top_k, hidden)
            with torch.no_grad():
                y_ref = eager(x, index, weights).float()
                times = {}
                for name, module in variants.items():
                    try:
                        y = module(x, index, weights).float()
                        if isinstance(module, _Graph):
                            graph = module.capture(x, index, weights)
                            times[name] = time_call(graph.replay, args.rounds)
                        else:
                            times[name] = time_call(lambda m=module: m(x, index, weights), args.rounds)
                    except Exception as exc:  # noqa: BLE001 - grouped_mm may not run (or be captured) on every build
                        print(f"{tokens:>6}  {name:<26} failed: {type(exc).__name__}: {exc}"[:160], flush=True)
                        continue
                    err = ((y - y_ref).norm() / y_ref.norm()).item()
                    row = dict(shape=shape, tokens=tokens, variant=name, us=times[name], rel_error=err,
                               vs_eager=times["bf16 eager"] / times[name],
                               vs_grouped=(times["bf16 grouped_mm"] / times[name]
                                           if "bf16 grouped_mm" in times else None),
                               weight_bytes=sizes[name])
                    rows.append(row)
                    vs_grouped = f"{row['vs_grouped']:.2f}x" if row["vs_grouped"] else "n/a"
                    print(f"{tokens:>6}  {name:<26} {row['us']:>10.1f} {row['vs_eager']:>8.2f}x {vs_grouped:>11} "
                          f"{err:>9.4f} {sizes[name] / 2**20:>7.0f}", flush=True)
        del variants, eager, grouped
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
