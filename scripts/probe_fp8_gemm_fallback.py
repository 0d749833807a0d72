"""fp8-block's ``gemm()`` (codes and scales given) where a decode config cannot run: the GEMM rule ``linear`` uses
there (``_gemm_default``, what ``_triton_gemm_config`` returns now) against the one swap config it returned for
every decode-sized layer before. GPU time as the sweep measures it (CUDA-graph replay, L2 flushed), ROUNDS
alternating rounds, median; the two outputs' largest difference beside.

    PYTHONPATH=. python scripts/probe_fp8_gemm_fallback.py ROUNDS M[,M ...] NxK[,NxK ...]
"""
import statistics
import sys

import torch

from quantkit.kernels import fp8_block as fk
from quantkit.kernels import tuning


def main():
    rounds, ms, shapes = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    print(torch.cuda.get_device_name(), torch.__version__, f"median of {rounds} alternating rounds, GPU µs", flush=True)
    torch.manual_seed(0)
    for shape in shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
        wq, ws = fk.quantize_weight(w)
        dense = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
        for m in (int(v) for v in ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            xq, xs = fk.quantize_act(x)
            configs = {"old swap": fk._swap(64, 64, 1, 4, 4, False), "new rule": fk._triton_gemm_config(m, n, k, 128)}
            runs = [("bf16", lambda x=x: torch.nn.functional.linear(x, dense))]
            runs += [(name, (lambda c=c, xq=xq, xs=xs: fk.gemm(xq, xs, wq, ws, None, torch.bfloat16, config=c)))
                     for name, c in configs.items()]
            outs = {name: fn().float() for name, fn in runs[1:]}
            gap = (outs["old swap"] - outs["new rule"]).abs().max().item()
            times = {name: [] for name, _ in runs}
            for r in range(rounds):
                for name, fn in (runs if r % 2 == 0 else runs[::-1]):
                    times[name].append(tuning.gpu_time_ms(fn) * 1e3)
            med = {name: statistics.median(t) for name, t in times.items()}
            print(f"M={m} {n}x{k}: bf16 {med['bf16']:.1f}  old swap {med['old swap']:.1f}  "
                  f"new rule {med['new rule']:.1f} ({med['new rule'] / med['old swap'] - 1:+.1%})  "
                  f"{configs['new rule']}  max|old-new| {gap:.3g}", flush=True)


if __name__ == "__main__":
    main()
