"""Where a quantized layer's GPU time goes, kernel by kernel: the layer run with each given config as the
benchmark runs it (L2 flushed before every call, as ``do_bench`` does), under ``torch.profiler``; prints each
kernel's mean duration and the layer's mean span (first kernel start to last kernel end, the flush excluded).
Also the GEMM alone on operands quantized once, for comparison.

    PYTHONPATH=. python scripts/probe_layer_kernels.py FAMILY M NxK[,NxK ...] 'CONFIG_JSON' ['CONFIG_JSON' ...]
"""
import importlib
import json
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile


def _spans(prof, calls):
    """(mean µs per kernel name, mean µs of each call's span) from a trace of ``calls`` layer calls, each
    preceded by the L2 flush (a fill kernel, excluded)."""
    events = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                    key=lambda e: e.time_range.start)
    per_name, groups, current = defaultdict(list), [], []
    for e in events:
        name = e.name
        if "fill" in name.lower() or "memset" in name.lower():  # the flush starts a new call
            if current:
                groups.append(current)
            current = []
            continue
        current.append(e)
        per_name[name[:90]].append(e.time_range.elapsed_us())
    if current:
        groups.append(current)
    spans = [g[-1].time_range.end - g[0].time_range.start for g in groups if g]
    return ({k: sum(v) / len(v) for k, v in per_name.items()}, sum(spans) / max(1, len(spans)), len(groups))


def main():
    family, m, shapes = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    configs = [json.loads(c) for c in sys.argv[4:]]
    mod = importlib.import_module(f"quantkit.kernels.{family}")
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    torch.manual_seed(0)
    for shape in shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        inputs = mod.make_bench_inputs(n, k, torch.bfloat16)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        for cfg in configs:
            run = lambda: mod.linear(x, *inputs, config=cfg)  # noqa: E731
            for _ in range(5):
                run()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    flush.zero_()
                    run()
                torch.cuda.synchronize()
            kernels, span, calls = _spans(prof, 20)
            print(f"{family} M={m} {n}x{k} {cfg}: layer span {span:.1f} us ({calls} calls)", flush=True)
            for name, us in sorted(kernels.items(), key=lambda kv: -kv[1]):
                print(f"    {us:8.1f} us  {name}", flush=True)


if __name__ == "__main__":
    main()
