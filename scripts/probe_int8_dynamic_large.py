"""Where the int8-dynamic layer's time goes at large M (row quantization, GEMM) against cuBLAS's 8-bit
GEMMs on the same operands (``torch._int_mm``; fp8 ``torch._scaled_mm`` with unit row scales, the
practical 8-bit tensor-core rate). GPU µs under do_bench with L2 flushed; TOP/s in brackets.

    PYTHONPATH=. python scripts/probe_int8_dynamic_large.py [M ...]   # default M = 1024 4096
"""
import sys
import torch
import triton.testing
import torch.nn.functional as F
from quantkit.kernels import int8_dynamic as i8

bench = lambda f: triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median") * 1e3  # noqa: E731
torch.manual_seed(0)
print("torch", torch.__version__, torch.cuda.get_device_name())
cfgs = {"tma256x128": i8._two_pass(256, 128, 128, 8, 3, mode="tma"),
        "tma128x256": i8._two_pass(128, 256, 128, 8, 3, mode="tma"),
        "pers128x256": i8._two_pass(128, 256, 128, 8, 3, mode="persistent")}
ms = [int(a) for a in sys.argv[1:]] or [1024, 4096]
for n, k in [(4096, 4096), (14336, 4096), (4096, 14336)]:
    w = (torch.randn(n, k, device="cuda") * 0.02).bfloat16()
    wq, ws = i8.quantize_weight(w)
    w8 = w.to(torch.float8_e4m3fn)
    for m in ms:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        xq, xs = i8.quantize_act(x)
        x8 = x.to(torch.float8_e4m3fn)
        sa = torch.ones(m, 1, device="cuda")
        sb = torch.ones(1, n, device="cuda")
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        r = {}
        r["bf16"] = bench(lambda: F.linear(x, w))
        r["quant"] = bench(lambda: i8.quantize_act(x))
        for name, c in cfgs.items():
            r["gemm_" + name] = bench(lambda: i8._gemm_launch(xq, k, xs, 0, wq, ws, None, out, m, n, k, c))
        r["layer"] = bench(lambda: i8.linear(x, wq, ws))
        r["cublas_int_mm"] = bench(lambda: torch._int_mm(xq, wq.t()))
        r["cublas_fp8_rowwise"] = bench(lambda: torch._scaled_mm(x8, w8.t(), sa, sb, out_dtype=torch.bfloat16))
        fl = 2 * m * n * k
        print(f"{n}x{k} M={m}: " + "  ".join(f"{a} {v:.1f}us ({fl / v / 1e6:.0f}T)" for a, v in r.items()), flush=True)
