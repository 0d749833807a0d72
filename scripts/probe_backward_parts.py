"""The parts of a quantized layer's backward, each timed alone (µs a call over 200 back-to-back calls, so the
larger of its host and GPU time), at 4096² for M = 128 and 1024: the Triton dequantization, the matmul, the
input-gradient function (both), and torch.autograd.grad on a kept graph (the whole backward).

    PYTHONPATH=. python scripts/probe_backward_parts.py
"""

import torch
from torch import nn

import quantkit
from quantkit.bench.common import synced_us_per_call as us
from quantkit.ops import linear as L




lin = nn.Linear(4096, 4096, bias=False, dtype=torch.bfloat16, device="cuda").requires_grad_(False)
for recipe in ("fp8-block", "int8-dynamic", "int8-weight-only", "int4-weight-only"):
    layer = quantkit.quantize_linear(lin, recipe)
    if recipe == "fp8-block":
        fam, w, gi = "fp8_block", (layer.weight, layer.weight_scale, 128), L._fp8_block_grad_input
    elif recipe == "int4-weight-only":
        fam, w = "int4_weight_only", (layer.weight_packed, layer.weight_scale, layer.weight_zero_point, 128)
        gi = L._int4_grad_input
    else:
        fam, w, gi = "int8_weight_only", (layer.weight, layer.weight_scale), L._int8_grad_input
    wd = L._dequantized(fam, torch.bfloat16, *w)
    for m in (128, 1024):
        x = torch.randn(m, 4096, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        g = torch.randn(m, 4096, dtype=torch.bfloat16, device="cuda")
        y = layer(x)
        parts = {
            "dequant": us(lambda: L._dequantized(fam, torch.bfloat16, *w)),
            "mm": us(lambda: g @ wd),
            "grad fn": us(lambda: gi(g, *w)),
            "autograd.grad": us(lambda: torch.autograd.grad(y, x, g, retain_graph=True)),
            "fwd": us(lambda: layer(x)),
        }
        print(f"{recipe} M={m}: " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()), flush=True)
    with torch.autograd.profiler.profile(use_cuda=False) as prof:
        for _ in range(5):
            L._dequantized(fam, torch.bfloat16, *w)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=6, max_name_column_width=50))
