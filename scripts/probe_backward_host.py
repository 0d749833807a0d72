"""Where a training step's time goes on a quantized layer: host µs per call of the forward without and with
autograd recording, the backward, and the input-gradient op alone (fp8-block / int4, 4096² M = 128), then a
cProfile of the recording forward.

    PYTHONPATH=. python scripts/probe_backward_host.py
"""
import cProfile
import pstats

import torch
from torch import nn

import quantkit
from quantkit.bench.common import synced_us_per_call as host_us




lin = nn.Linear(4096, 4096, bias=False, dtype=torch.bfloat16, device="cuda").requires_grad_(False)
for recipe in ("bf16", "fp8-block", "int4-weight-only"):
    layer = lin if recipe == "bf16" else quantkit.quantize_linear(lin, recipe)
    x = torch.randn(128, 4096, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    g = torch.randn(128, 4096, dtype=torch.bfloat16, device="cuda")
    with torch.no_grad():
        a = host_us(lambda: layer(x))
    b = host_us(lambda: layer(x))
    c = host_us(lambda: torch.autograd.grad(layer(x), x, g))
    print(f"{recipe}: no-grad fwd {a:.1f} µs, recording fwd {b:.1f} µs, fwd+bwd {c:.1f} µs", flush=True)
    if recipe != "bf16":
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(50):
            torch.autograd.grad(layer(x), x, g)
        torch.cuda.synchronize()
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(15)
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                torch.autograd.grad(layer(x), x, g)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=60))
