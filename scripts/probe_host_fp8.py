"""Host time of fp8-block's cuBLAS path at 4096² (M = 1024, 4096): the layer, ``fp8_block.linear``, the
activation-quantization launch, ``torch._scaled_mm`` and the two allocations (host µs per call, min /
median / max, as scripts/host_breakdown.py measures), then a cProfile of 300 layer calls.

    PYTHONPATH=. python scripts/probe_host_fp8.py
"""
import cProfile
import io
import pstats
import sys

import torch

import quantkit
from quantkit.kernels import fp8_block as f8

sys.path.insert(0, "scripts")
from host_breakdown import host_us  # noqa: E402

torch.manual_seed(0)
n = k = 4096
lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
torch.nn.init.normal_(lin.weight, std=0.02)
layer = quantkit.quantize_linear(lin, "fp8-block")
bufs = layer.kernel_args()
for m in (1024, 4096):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    xq = torch.empty(m, k, dtype=torch.float8_e4m3fn, device="cuda")
    xs = torch.empty(k // 128, m, dtype=torch.float32, device="cuda")
    wq, ws = bufs[0], bufs[1]
    with torch.no_grad():
        print(f"M={m} layer {host_us(lambda: layer(x))}  linear {host_us(lambda: f8.linear(x, *bufs))}")
        print(f"   act_quant {host_us(lambda: f8._launch_act_quant(x, xq, xs, 1, m, 128, False))}"
              f"  scaled_mm {host_us(lambda: torch._scaled_mm(xq, wq.t(), xs.t(), ws.t(), out_dtype=torch.bfloat16))}"
              f"  empty2 {host_us(lambda: (torch.empty(m, k, dtype=torch.float8_e4m3fn, device='cuda'), torch.empty(k // 128, m, device='cuda')))}", flush=True)
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(300):
            layer(x)
        torch.cuda.synchronize()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
        print(s.getvalue()[:5000])
