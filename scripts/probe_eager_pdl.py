"""Eager against CUDA-graph time of fp8-block layers whose GEMM is launched with PDL (programmatic dependent
launch) after the activation quantization, and the same configs without PDL: per layer, ``do_bench`` eager
(PERFORMANCE.md's method), GPU time replayed from a CUDA graph, and host µs per call (as
scripts/host_breakdown.py measures), each config called through a launch plan as layers call it.

    PYTHONPATH=. python scripts/probe_eager_pdl.py [M ...]
"""
import sys

import torch
import triton.testing

import quantkit
from quantkit.kernels import fp8_block as F
from quantkit.kernels import tuning
from quantkit.kernels.plan import Plan, planned

sys.path.insert(0, "scripts")
from host_breakdown import host_us  # noqa: E402

CONFIGS = {"gluon64 pdl": F._gluon(128, 64, 8, 6, pdl=True), "gluon64": F._gluon(128, 64, 8, 6),
           "swap split2 pdl": F._swap(64, 64, 2, 4, 3, False, split_k=2, pdl=True),
           "swap split2": F._swap(64, 64, 2, 4, 3, False, split_k=2),
           "decode pdl": F._decode(1, 4, dk=128), "decode": F._decode(1, 4, dk=128, pdl=False)}


def main():
    ms = [int(a) for a in sys.argv[1:]] or [16, 128, 1024]
    torch.manual_seed(0)
    for n, k in [(4096, 4096), (14336, 4096)]:
        lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
        torch.nn.init.normal_(lin.weight, std=0.02)
        layer = quantkit.quantize_linear(lin, "fp8-block")
        args = layer.kernel_args()
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                t_bf16 = triton.testing.do_bench(lambda: lin(x), warmup=25, rep=100, return_mode="median") * 1e3
                t_layer = triton.testing.do_bench(lambda: layer(x), warmup=25, rep=100, return_mode="median") * 1e3
                print(f"{n}x{k} M={m}: bf16 {t_bf16:.1f} us; layer (tuned) eager {t_layer:.1f} us, "
                      f"host {host_us(lambda: layer(x))}", flush=True)
                for name, cfg in CONFIGS.items():
                    if (cfg["kernel"] == "decode") != (m <= 16):
                        continue
                    pl = planned(lambda t, *a, cfg=cfg: F.linear(t, *a, config=cfg))  # as layers call it
                    fn = lambda: pl(x, *args)  # noqa: E731
                    fn()
                    fn()
                    kinds = [type(p).__name__ if isinstance(p, Plan) else p for p in pl.plans.values()]
                    eager = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3
                    graph = tuning.gpu_time_ms(fn) * 1e3
                    print(f"    {name:16s} eager {eager:6.1f} us  graph {graph:6.1f} us  host {host_us(fn)}  "
                          f"plan: {kinds}", flush=True)


if __name__ == "__main__":
    main()
