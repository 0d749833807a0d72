"""The weight-only GEMMs at M between the tuned buckets: the config the tables give against 128-row variants.

    python scripts/probe_wo_rows.py [--m 300,530,...] [--shapes 14336x4096,...] [--families int8,int4,int8dyn]

The large-M tables hold 256-row x tiles; at M just past a multiple of 256 the last tile is mostly padding (M = 530:
768 rows computed). Per (family, shape, M): GPU µs from a CUDA graph (tuning.gpu_time_ms) of bf16 F.linear, the
config the layer picks (`linear` without a config), and each variant in VARIANTS (DYNAMIC_VARIANTS for int8-dynamic).
"""
from __future__ import annotations

import argparse
import sys

import torch

from quantkit.kernels import int4_weight_only as i4
from quantkit.kernels import int8_dynamic as i8d
from quantkit.kernels import int8_weight_only as i8
from quantkit.kernels.tuning import gpu_time_ms

VARIANTS = {
    "128x128x128 s4 sk": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, num_warps=8, num_stages=4, PERSISTENT=True,
                              STREAM_K=True),
    "128x128x64 s5 sk": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=5, PERSISTENT=True,
                             STREAM_K=True),
    "128x128x128 s4": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, num_warps=8, num_stages=4),
    "256x128x64 s4 sk": dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=4, PERSISTENT=True,
                             STREAM_K=True),
}
#: ``--families int8dyn``: int8-dynamic's Gluon GEMMs (the sweep's picks at M = 530 and 1100, round 39 call 10)
DYNAMIC_VARIANTS = {
    "128x256 gluon": dict(kernel="two_pass", BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=8, SPLIT_K=1, num_warps=8,
                          num_stages=4, mode="gluon", pdl=False),
    "128x128 ws tma": dict(kernel="two_pass", BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, SPLIT_K=1,
                           num_warps=8, num_stages=5, mode="gluon_ws", pdl=False, EPI="tma"),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", default="300,384,530,600,700,768,1100,1300,2100")
    parser.add_argument("--shapes", default="14336x4096,4096x14336,4096x4096")
    parser.add_argument("--families", default="int8,int4")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    print(f"{'family':6} {'N×K':>11} {'M':>5} {'bf16':>7} {'table':>7}  variants (µs, against bf16)")
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        for fam in args.families.split(","):
            variants = {name: {"kernel": "tma_wgmma", "GROUP_M": 8, **v} for name, v in VARIANTS.items()}
            if fam == "int8dyn":
                buffers = i8d.make_bench_inputs(n, k, torch.bfloat16)
                run = lambda x, cfg=None: i8d.linear(x, *buffers, config=cfg)  # noqa: E731
                variants = DYNAMIC_VARIANTS
            elif fam == "int8":
                buffers = i8.make_bench_inputs(n, k, torch.bfloat16)
                run = lambda x, cfg=None: i8.linear(x, *buffers, config=cfg)  # noqa: E731
            else:
                buffers = i4.make_bench_inputs(n, k, torch.bfloat16)
                run = lambda x, cfg=None: i4.linear(x, *buffers, config=cfg)  # noqa: E731
            for m in (int(v) for v in args.m.split(",")):
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                bf16 = gpu_time_ms(lambda: torch.nn.functional.linear(x, w)) * 1e3
                table = gpu_time_ms(lambda: run(x)) * 1e3
                ref = run(x)
                cells = []
                for name, cfg in variants.items():
                    try:
                        y = run(x, cfg)
                        err = (y.float() - ref.float()).abs().max().item()
                        t = gpu_time_ms(lambda: run(x, cfg)) * 1e3
                        cells.append(f"{name}: {t:7.1f} ({bf16 / t:4.2f}x)" + ("!" if err > 0.05 else " "))
                    except Exception as exc:  # noqa: BLE001
                        cells.append(f"{'failed':>17}")
                        print("  ", name, type(exc).__name__, str(exc)[:120], file=sys.stderr)
                print(f"{fam:6} {shape:>11} {m:5d} {bf16:7.1f} {table:7.1f}  " + "  ".join(cells)
                      + f"   table {bf16 / table:4.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
