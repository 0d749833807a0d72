"""How the int4 decode kernel's time at M = 16 depends on the number of programs a SM gets: the shipped
14336x4096 config (MT 4, WK 4: 64 rows and 4 warps a program, two programs an SM by registers) timed at N
from 64 to 264 programs (one to two per SM on an H100's 132 SMs), K = 4096, GPU time as the sweep measures it.
If the time is flat from 133 to 264 programs, the busiest SMs (two programs) set it and the others idle.

    PYTHONPATH=. python scripts/probe_decode_waves.py
"""
import torch

from quantkit.kernels import int4_weight_only as Q
from quantkit.kernels import tuning

cfg = Q._decode(4, 4, xpf=False)
for m in (16, 1):
    for programs in (66, 100, 132, 133, 150, 180, 198, 224, 240, 264, 265, 300):
        n, k = 64 * programs, 4096
        args = Q.make_bench_inputs(n, k)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        t = tuning.gpu_time_ms(lambda: Q.linear(x, *args, config=cfg)) * 1e3
        print(f"M={m} N={n} ({programs} programs): {t:6.2f} us, {t / (2 * -(-programs // 132)):.2f} us per "
              f"program-round", flush=True)
        del args, x
