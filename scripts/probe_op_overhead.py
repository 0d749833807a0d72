"""Host cost of the custom ops: µs a call (200 back-to-back calls, so the larger of host and GPU time) of a
quantized 4096² layer at M = 1, no grad: eager (the plain entry point, launch plans), the custom op called
directly (torch.ops.quantkit.*), and the layer under torch.compile (Inductor, no CUDA graphs), beside bf16's
F.linear eager and compiled; then a cProfile of the direct op calls.

    PYTHONPATH=. python scripts/probe_op_overhead.py
"""
import cProfile
import pstats

import torch
import torch.nn.functional as F
from torch import nn

import quantkit
from quantkit.bench.common import synced_us_per_call as us




lin = nn.Linear(4096, 4096, bias=False, dtype=torch.bfloat16, device="cuda").requires_grad_(False)
x = torch.randn(1, 4096, dtype=torch.bfloat16, device="cuda")
with torch.no_grad():
    compiled_bf16 = torch.compile(lambda t: F.linear(t, lin.weight))
    print(f"bf16: eager {us(lambda: F.linear(x, lin.weight)):.1f} µs, compiled {us(lambda: compiled_bf16(x)):.1f}",
          flush=True)
    for recipe in ("fp8-block", "int8-weight-only", "int4-weight-only"):
        layer = quantkit.quantize_linear(lin, recipe)
        if recipe == "fp8-block":
            op = lambda: torch.ops.quantkit.fp8_block_linear(x, layer.weight, layer.weight_scale, None, 128, "")  # noqa
        elif recipe == "int8-weight-only":
            op = lambda: torch.ops.quantkit.int8_weight_only_linear(x, layer.weight, layer.weight_scale, None)  # noqa
        else:
            op = lambda: torch.ops.quantkit.int4_weight_only_linear(  # noqa
                x, layer.weight_packed, layer.weight_scale, layer.weight_zero_point, None, 128)
        compiled = torch.compile(layer)
        print(f"{recipe}: eager {us(lambda: layer(x)):.1f} µs, op {us(op):.1f}, compiled {us(lambda: compiled(x)):.1f}",
              flush=True)
        if recipe == "int8-weight-only":
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(100):
                op()
            torch.cuda.synchronize()
            pr.disable()
            pstats.Stats(pr).sort_stats("tottime").print_stats(12)
