"""Would splitting K across programs help at decode sizes? Time the same weight bytes at shapes where each
program's K range is 1/2 and 1/4 as long (N x K, 2N x K/2, 4N x K/4): same bytes, same program count at
a given rows-per-program, shorter K chains and, at wider row blocks, less x read per weight byte. That is
what a split-K launch of the same kernel would see, minus its reduction. GPU time as the sweep measures it
(CUDA-graph replay, L2 flushed); the best of the family's sweep candidates at each shape.

    PYTHONPATH=. python scripts/probe_split_equivalent.py [FAMILY:M[:G] ...]      (default: all below)

G picks one group of GROUPS (0: 4096² and its splits, 1: 14336x4096's, 2: 4096x14336's).
"""
import sys

import torch

from quantkit.kernels import fp8_block as F
from quantkit.kernels import int4_weight_only as Q
from quantkit.kernels import int8_dynamic as I
from quantkit.kernels import int8_weight_only as W
from quantkit.kernels import tuning

FAMILIES = {"int8w": W, "int4": Q, "fp8": F, "int8": I}
EXTRA = {  # wider row blocks than the sweep's, to see the x traffic per weight byte fall
    "int8w": [W._stream_config(32, 512, 4, 4), W._stream_config(64, 256, 4, 4), W._stream_config(64, 512, 8, 3)],
    "int4": [Q._small(64, 4, 4, 3), Q._decode(4, 4, xpf=False), Q._decode(2, 8)],
    "fp8": [F._decode(2, 2), F._decode(2, 4)],
    "int8": [I._decode(2, 2), I._decode(2, 4)],
}
GROUPS = [[(4096, 4096), (8192, 2048), (16384, 1024)], [(14336, 4096), (28672, 2048), (57344, 1024)],
          [(4096, 14336), (8192, 7168), (16384, 3584)]]
DEFAULT = ["int8w:16", "int4:16", "fp8:16", "int8:16", "int8w:1", "int4:1"]


def inputs(mod, n, k):
    return mod.make_bench_inputs(n, k, torch.bfloat16) if mod is W else mod.make_bench_inputs(n, k)


def main():
    todo = sys.argv[1:] or DEFAULT
    for item in todo:
        fam, m, *which = item.split(":")  # FAMILY:M[:G], G the index of one group of shapes
        m = int(m)
        mod = FAMILIES[fam]
        for group in ([GROUPS[int(which[0])]] if which else GROUPS):
            for n, k in group:
                args = inputs(mod, n, k)
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                t_ship = tuning.gpu_time_ms(lambda: mod.linear(x, *args)) * 1e3
                best, best_cfg = t_ship, "shipped/default"
                seen = []
                for cfg in mod.candidate_configs(m, n, k) + EXTRA.get(fam, []):
                    if cfg in seen:
                        continue
                    seen.append(cfg)
                    try:
                        t = tuning.gpu_time_ms(lambda: mod.linear(x, *args, config=cfg)) * 1e3
                    except Exception as exc:  # noqa: BLE001 - a config a shape cannot take
                        print(f"    skip {cfg}: {type(exc).__name__}: {str(exc)[:80]}", flush=True)
                        continue
                    if t < best:
                        best, best_cfg = t, cfg
                print(f"{fam} M={m} {n}x{k}: shipped/default {t_ship:6.2f} us  best {best:6.2f} us  {best_cfg}",
                      flush=True)
                del args, x
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
