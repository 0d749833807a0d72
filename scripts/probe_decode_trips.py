"""How the int4 decode kernel's time at one program an SM depends on the K trips each program makes
in sequence: the shipped 14336x4096 M = 16 config (MT 4, WK 4, DK 128: 64 rows and four warps a program,
each trip one 128-deep chunk per warp) at N = 8448 (132 programs, one an SM) and N = 16896 (264, two an
SM) for K = 1024 ... 16384, M = 16 and 1, GPU time as the sweep measures it. The slope per trip is the
time one trip takes when nothing else is in flight on the SM; the intercept is the launch, the timer
and the epilogue. The Triton ``small`` kernel (cp.async ring in shared memory) is timed beside it.

    PYTHONPATH=. python scripts/probe_decode_trips.py
"""
import torch

from quantkit.kernels import int4_weight_only as Q
from quantkit.kernels import tuning

decode = Q._decode(4, 4, xpf=False)
small = Q._small(16, 4, 4, 4)  # the shipped 4096² M = 16 config
for m in (16, 1):
    for n in (8448, 16896):
        for k in (1024, 2048, 4096, 8192, 16384):
            args = Q.make_bench_inputs(n, k)
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            trips = k // (4 * 128)
            t = tuning.gpu_time_ms(lambda: Q.linear(x, *args, config=decode)) * 1e3
            ts = tuning.gpu_time_ms(lambda: Q.linear(x, *args, config=small)) * 1e3
            mb = n * k / 2 / 1e6
            print(f"M={m} N={n} K={k} ({trips} trips, {mb:.1f} MB): decode {t:6.2f} us ({mb / t:.2f} TB/s), "
                  f"small {ts:6.2f} us ({mb / ts:.2f} TB/s)", flush=True)
            del args, x
