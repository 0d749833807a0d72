"""A/B of a family's configs on one cell at a time, robust to a warming GPU: bf16 ``F.linear``, the shipped
config and each given config are timed ROUNDS times (GPU time as the sweep measures it: CUDA-graph replay,
L2 flushed), the order reversed every other round, and the median kept. A long 8-bit GEMM slows by 5-10 %
as the GPU warms, so a single sweep ranks configs measured later as slower; alternating cancels that.
Outputs are compared with the shipped config's (max |d|).

    PYTHONPATH=. python scripts/probe_ab_configs.py FAMILY M NxK[,NxK ...] ROUNDS 'CONFIG_JSON' ['CONFIG_JSON' ...]

FAMILY: a kernel module name (int8_dynamic, fp8_block, int8_weight_only, int4_weight_only).
"""
import importlib
import json
import sys

import torch

from quantkit.kernels import tuning


def main():
    family, m, shapes, rounds = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    configs = [json.loads(c) for c in sys.argv[5:]]
    mod = importlib.import_module(f"quantkit.kernels.{family}")
    print(torch.cuda.get_device_name(), torch.__version__, f"{family} M={m}, median of {rounds} alternating rounds",
          flush=True)
    torch.manual_seed(0)
    for shape in shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        inputs = mod.make_bench_inputs(n, k, torch.bfloat16)
        w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        shipped = tuning.get_config(family, m, n, k, module=mod)
        ref = mod.linear(x, *inputs, config=shipped)
        runs = [("bf16", lambda: torch.nn.functional.linear(x, w)),
                ("shipped", lambda: mod.linear(x, *inputs, config=shipped))]
        runs += [(json.dumps(c), (lambda c=c: mod.linear(x, *inputs, config=c))) for c in configs]
        diffs = {label: (fn().float() - ref.float()).abs().max().item() for label, fn in runs[2:]}
        times = {label: [] for label, _ in runs}
        for r in range(rounds):
            for label, fn in (runs if r % 2 == 0 else runs[::-1]):
                times[label].append(tuning.gpu_time_ms(fn) * 1e3)
        med = {label: sorted(v)[len(v) // 2] for label, v in times.items()}
        print(f"{n}x{k}: bf16 {med['bf16']:.1f} us; shipped {med['shipped']:.1f} us "
              f"({med['bf16'] / med['shipped']:.3f}x)  {shipped}", flush=True)
        for label, _ in runs[2:]:
            t = med[label]
            rounds_text = " ".join(f"{v:.1f}" for v in times[label])
            change = 100 * (t / med["shipped"] - 1)
            print(f"    {t:7.1f} us ({med['bf16'] / t:.3f}x bf16, {change:+5.1f} % vs shipped)  "
                  f"max|d| {diffs[label]:.3g}  rounds {rounds_text}  {label}", flush=True)
        print(f"    shipped rounds {' '.join(f'{v:.1f}' for v in times['shipped'])}; "
              f"bf16 rounds {' '.join(f'{v:.1f}' for v in times['bf16'])}", flush=True)


if __name__ == "__main__":
    main()
