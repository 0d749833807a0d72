#!/usr/bin/env python
"""int8-dynamic per-layer breakdown on the GPU: the whole forward against bf16 F.linear, and where the
time goes (activation quantization pass, GEMM), with bit-exactness against the reference.

    python scripts/bench_int8_dynamic.py [--json out.json]

Prints one markdown row per PERFORMANCE.md cell (N×K × M, bf16, no bias, L2 flushed by do_bench).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton.testing  # noqa: E402

from quantkit.kernels import int8_dynamic as ik  # noqa: E402
from quantkit.kernels.tuning import BENCH_M, LLAMA_SHAPES, get_config  # noqa: E402
from quantkit.reference import int8 as R  # noqa: E402


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3  # µs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}")
    print("| N×K | M | bf16 µs | int8 µs | speedup | quant µs | GEMM µs | TOP/s (GEMM) | config | bit-exact |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for n, k in LLAMA_SHAPES:
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        weight_q, weight_scale = ik.quantize_weight(w)
        for m in BENCH_M:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            config = get_config(ik.FAMILY, m, n, k, module=ik)
            t_bf16 = bench(lambda: F.linear(x, w))
            t_int8 = bench(lambda: ik.linear(x, weight_q, weight_scale, config=config))
            t_quant = bench(lambda: ik.quantize_act(x))
            x_q, x_scale = ik.quantize_act(x)
            gemm_cfg = config if config["kernel"] == "two_pass" else None
            t_gemm = bench(lambda: ik.gemm(x_q, x_scale, weight_q, weight_scale, None, x.dtype, config=gemm_cfg))
            y = ik.linear(x, weight_q, weight_scale, config=config)
            mismatches = int((y != R.int8_dynamic_linear(x, weight_q, weight_scale)).sum())
            row = {"N": n, "K": k, "M": m, "bf16_us": t_bf16, "int8_us": t_int8, "speedup": t_bf16 / t_int8,
                   "quant_us": t_quant, "gemm_us": t_gemm, "gemm_tops": 2 * m * n * k / t_gemm / 1e6,
                   "config": config, "mismatches": mismatches}
            rows.append(row)
            cfg = ",".join(f"{v}" for key, v in config.items() if key != "GROUP_M")
            print(f"| {n}×{k} | {m} | {t_bf16:.1f} | {t_int8:.1f} | {row['speedup']:.2f}x | {t_quant:.1f} | "
                  f"{t_gemm:.1f} | {row['gemm_tops']:.0f} | {cfg} | {'yes' if not mismatches else mismatches} |",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "triton": triton.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
