"""A training step on one quantized layer (torch.autograd.grad(layer(x), x, g), 4096², M = 128): µs a step over
200 back-to-back steps, with the cudaMalloc calls (allocator segments) made meanwhile, next to bf16 and to the
forward and backward timed apart; then the same with launch plans off (run again with QUANTKIT_LAUNCH_PLANS=0).

    PYTHONPATH=. python scripts/probe_train_step.py
"""
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

import quantkit


def us(fn, n=200):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    seg = torch.cuda.memory_stats().get("segment.all.allocated", 0)
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6, torch.cuda.memory_stats().get("segment.all.allocated", 0) - seg


lin = nn.Linear(4096, 4096, bias=False, dtype=torch.bfloat16, device="cuda").requires_grad_(False)
x = torch.randn(128, 4096, dtype=torch.bfloat16, device="cuda", requires_grad=True)
g = torch.randn(128, 4096, dtype=torch.bfloat16, device="cuda")
print("plans", os.environ.get("QUANTKIT_LAUNCH_PLANS", "on"))
for recipe in ("bf16", "fp8-block", "int4-weight-only"):
    layer = lin if recipe == "bf16" else quantkit.quantize_linear(lin, recipe)
    y = layer(x)
    step, segs = us(lambda: torch.autograd.grad(layer(x), x, g))
    fwd, _ = us(lambda: layer(x))
    bwd, _ = us(lambda: torch.autograd.grad(y, x, g, retain_graph=True))
    both, _ = us(lambda: (layer(x), torch.autograd.grad(y, x, g, retain_graph=True)))
    print(f"{recipe}: step {step:.1f} µs ({segs} cudaMallocs), fwd {fwd:.1f}, bwd {bwd:.1f}, fwd then old bwd {both:.1f}",
          flush=True)
