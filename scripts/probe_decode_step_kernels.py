"""Where a CUDA-graph decode step of the Llama-3-8B-shaped decoder spends its time, kernel by kernel.

One decode step (batch B, the benchmark's `bench e2e` step: the model forward, the argmax, the position
update) is captured in a CUDA graph and replayed; torch.profiler records the kernels of REPLAYS replays.
For each replay: the span from the first kernel's start to the last kernel's end, the sum of kernel
durations, and the idle time between kernels. Kernels are grouped by name; for each group, count, total
µs per step and the mean gap before its kernels. What a kernel could gain by starting its weight stream
before the kernel ahead of it has finished is bounded by those gaps plus its own ramp.

    PYTHONPATH=. python scripts/probe_decode_step_kernels.py RECIPE|bf16 [--batch 1] [--layers 32]
        [--replays 5] [--json FILE]
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics

import torch
from torch.profiler import ProfilerActivity, profile

from quantkit import quantize_
from quantkit.bench.decoder import DecoderConfig, build_decoder, round_up
from quantkit.bench.e2e import Step


def _kernels(prof) -> list[tuple[str, float, float]]:
    """(name, start µs, duration µs) of every GPU kernel, in start order."""
    out = []
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA and evt.time_range.elapsed_us() > 0:
            name = evt.name
            if name.startswith(("Memcpy", "Memset")):
                continue
            out.append((name, float(evt.time_range.start), float(evt.time_range.elapsed_us())))
    out.sort(key=lambda k: k[1])
    return out


def _captured(one_step, device) -> torch.cuda.CUDAGraph:
    """``one_step`` captured the way `bench e2e` captures it (two warm-up calls on a side stream first)."""
    step = Step(one_step, device, use_graph=True, warmup=2)
    if step.graph is None:
        raise RuntimeError(f"the decode step could not be captured: {step.graph_error}")
    return step.graph


def decode_step(recipe: str, layers: int, batch: int, positions: int):
    """The Llama-3-8B-shaped decoder (``layers`` deep, quantized with ``recipe`` unless bf16, glue compiled)
    after a 64-token prefill, and its `bench e2e` decode step: the forward, the argmax, the position + 1. The
    KV cache has room for ``positions`` steps. Returns (one_step, pos, prompt_len)."""
    device = torch.device("cuda")
    cfg = DecoderConfig.preset("llama3-8b", n_layers=layers)
    model = build_decoder(cfg, device, torch.bfloat16, seed=0)
    if recipe != "bf16":
        quantize_(model, recipe)
    model.fuse_glue()
    prompt_len = 64
    model.setup_cache(batch, round_up(prompt_len + positions, 64))
    gen = torch.Generator(device="cpu").manual_seed(2)
    prompt = torch.randint(0, cfg.vocab_size, (batch, prompt_len), generator=gen).to(device)
    with torch.no_grad():
        first = model(prompt, None, True)
    token = first[:, -1].argmax(-1, keepdim=True)
    pos = torch.tensor([prompt_len], device=device)

    @torch.no_grad()
    def one_step():
        logits = model(token, pos, False)
        token.copy_(logits[:, -1].argmax(-1, keepdim=True))
        pos.add_(1)
        return logits

    return one_step, pos, prompt_len


def replay_ms(graph: torch.cuda.CUDAGraph, replays: int) -> float:
    """Milliseconds a replay, ``replays`` back to back between two CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / replays


def append_json(path: str | None, row: dict) -> dict:
    """``row`` as one more line of the JSON-lines file ``path`` (none: nothing written)."""
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
    return row


def _group(name: str) -> str:
    return name.split("(")[0][:60]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipe")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    device = torch.device("cuda")
    # positions: two warm-up calls, 5 + 20 timed replays and the profiled ones
    one_step, _, _ = decode_step(args.recipe, args.layers, args.batch, 27 + args.replays)
    graph = _captured(one_step, device)
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    step_ms = replay_ms(graph, 20)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.replays):
            graph.replay()
            torch.cuda.synchronize()
    kernels = _kernels(prof)
    per_replay = len(kernels) // args.replays
    spans, busies = [], []
    groups: dict[str, list] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for r in range(args.replays):
        ks = kernels[r * per_replay:(r + 1) * per_replay]
        spans.append(ks[-1][1] + ks[-1][2] - ks[0][1])
        busies.append(sum(k[2] for k in ks))
        prev_end = None
        for name, t0, dur in ks:
            g = groups[_group(name)]
            g[0] += 1
            g[1] += dur
            if prev_end is not None:
                g[2] += max(0.0, t0 - prev_end)
            prev_end = max(prev_end or 0.0, t0 + dur)
    row = {"recipe": args.recipe, "batch": args.batch, "layers": args.layers, "step_ms_events": round(step_ms, 4),
           "kernels_per_step": per_replay, "span_us": round(statistics.median(spans), 1),
           "busy_us": round(statistics.median(busies), 1),
           "groups": sorted(([name, c // args.replays, round(t / args.replays, 1), round(gap / max(c, 1), 2)]
                             for name, (c, t, gap) in groups.items()), key=lambda g: -g[2])}
    row["idle_us"] = round(row["span_us"] - row["busy_us"], 1)
    print(f"{args.recipe} b{args.batch}: step {step_ms:.3f} ms (events), span {row['span_us']} µs, "
          f"kernels {per_replay}, busy {row['busy_us']} µs, idle {row['idle_us']} µs")
    for name, count, total, gap in row["groups"][:25]:
        print(f"  {count:5d} x {name:<60} {total:9.1f} µs/step  mean gap before {gap:5.2f} µs")
    return append_json(args.json, row)


if __name__ == "__main__":
    main()
