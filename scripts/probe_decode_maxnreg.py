"""The weight-only decode kernel's shipped configs with a register budget (``MAXNREG``) above what ptxas
picks by itself, GPU time as the sweep measures it (CUDA-graph replay, L2 flushed), outputs checked
bit-identical to the shipped config's. Why: left to itself, ptxas schedules each trip's weight loads a
few dozen instructions before their first use (apparently to hold its own register target, and so the
warps an SM), which undoes the kernel's one-trip-ahead prefetch; a larger budget lets it issue them
earlier (the distances are in notes/int4_weight_only.md, round 16). Measured there: slower at M = 1,
3-4 % faster in two cells.

    PYTHONPATH=. python scripts/probe_decode_maxnreg.py
"""
import sys

import torch

from quantkit.kernels import int4_weight_only as Q
from quantkit.kernels import int8_weight_only as W
from quantkit.kernels import tuning

CELLS = [  # (module, M, N, K, budgets)
    (Q, 1, 14336, 4096, (80, 96, 112, 128, 168)), (Q, 1, 4096, 14336, (112, 128, 168)),
    (Q, 1, 1024, 4096, (96, 128)), (Q, 16, 4096, 14336, (168, 208)),
    (W, 1, 14336, 4096, (96, 128)), (W, 1, 4096, 4096, (96, 128)), (W, 1, 4096, 14336, (96, 128)),
    (W, 16, 14336, 4096, (96, 128, 168)),
]
torch.manual_seed(0)
only = sys.argv[1:]  # e.g. "int8_weight_only" to run one family's cells
for mod, m, n, k, budgets in CELLS:
    if only and mod.FAMILY not in only:
        continue
    args = mod.make_bench_inputs(n, k, torch.bfloat16) if mod is W else mod.make_bench_inputs(n, k)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    shipped = tuning.get_config(mod.FAMILY, m, n, k, module=mod)
    if shipped.get("kernel") != "decode":
        print(f"{mod.FAMILY} M={m} {n}x{k}: shipped {shipped} is not a decode config, skipped", flush=True)
        continue
    ref = mod.linear(x, *args, config=shipped)
    t0 = tuning.gpu_time_ms(lambda: mod.linear(x, *args, config=shipped)) * 1e3
    print(f"{mod.FAMILY} M={m} {n}x{k}: shipped {t0:6.2f} us  {shipped}", flush=True)
    for mr in budgets:
        cfg = dict(shipped, MAXNREG=mr)
        same = torch.equal(mod.linear(x, *args, config=cfg), ref)
        t = tuning.gpu_time_ms(lambda: mod.linear(x, *args, config=cfg)) * 1e3
        print(f"    MAXNREG {mr:3d}: {t:6.2f} us ({100 * (t / t0 - 1):+5.1f} %) {'bit-identical' if same else 'DIFFERS'}",
              flush=True)
    del args, x
