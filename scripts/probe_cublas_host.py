"""Where the host time of fp8-block's cuBLAS path goes: the layer call (planned) against ``torch._scaled_mm``
alone and bf16 ``F.linear``, host µs a call, and torch.profiler's CPU-side view of a few calls (ATen ops and
CUDA runtime / driver API calls).

    python scripts/probe_cublas_host.py [M] [NxK]
"""
import sys

import torch
import torch.nn.functional as F

from quantkit.bench.common import host_us_per_call
from quantkit.kernels import fp8_block as fk
from quantkit.kernels.plan import planned


def main():
    m = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    n, k = (int(v) for v in (sys.argv[2] if len(sys.argv) > 2 else "4096x4096").split("x"))
    torch.manual_seed(0)
    w = (torch.randn(n, k, device="cuda") * 0.02).bfloat16()
    wq, ws = fk.quantize_weight(w)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    x_q, x_s = fk.quantize_act(x)
    x_s_k = x_s.t().contiguous().t()
    layer = planned(lambda x_, w_, s_: fk.linear(x_, w_, s_, config=fk._cublas()))
    gluon = planned(lambda x_, w_, s_: fk.linear(x_, w_, s_, config=fk._gluon(128, 128, 8, 4, epi="tma")))
    calls = {
        "bf16 F.linear": lambda: F.linear(x, w),
        "_scaled_mm alone": lambda: torch._scaled_mm(x_q, wq.t(), x_s_k, ws.t(), out_dtype=torch.bfloat16),
        "layer, cuBLAS (planned)": lambda: layer(x, wq, ws),
        "layer, Gluon GEMM (planned)": lambda: gluon(x, wq, ws),
    }
    for name, fn in calls.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        print(f"{n}x{k} M={m} {name:28s} host {host_us_per_call(fn, calls=50, batches=7):7.1f} us a call", flush=True)
    from torch.profiler import ProfilerActivity, profile

    for name in ("_scaled_mm alone", "layer, cuBLAS (planned)"):
        fn = calls[name]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                fn()
            torch.cuda.synchronize()
        print(f"--- {name}: 10 calls, CPU-side self time")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))


if __name__ == "__main__":
    main()
