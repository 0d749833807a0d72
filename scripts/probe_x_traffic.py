"""How much of a decode-size layer's time is the x operand's traffic from L2? At M = 16 every program of
the decode kernels reads all of x (16 rows × K) for its 16-64 weight rows, so at 4096² the x bytes that
cross from L2 to the SMs equal the weight bytes (8-bit x) or twice them (bf16 x), where at M = 1 they are
1/16 of that. This times each family's shipped M = 16 kernel on the same bytes twice: with x as usual, and
with all 16 x rows at one address (row stride 0), where a warp's x load is one row's bytes and the L1 / L2
traffic of x shrinks ~16-fold while the instruction stream stays the same. The difference bounds what a
kernel with more x reuse (wider programs, split along K) could win. The weight-only layers at M = 1 are
timed too, for the same weight bytes with one x row.

GPU time as the sweep measures it (CUDA-graph replay, L2 flushed), the median of ROUNDS alternating rounds.

    PYTHONPATH=. python scripts/probe_x_traffic.py [ROUNDS] [FAMILY:M:NxK ...]
"""
import sys

import torch

from quantkit.kernels import aq_decode_sm90 as aq
from quantkit.kernels import fp8_block as F
from quantkit.kernels import int4_weight_only as I4
from quantkit.kernels import int8_dynamic as I
from quantkit.kernels import int8_weight_only as W8
from quantkit.kernels import tuning
from quantkit.reference.common import ceil_div

SHAPES = ["4096x4096", "14336x4096", "4096x14336"]
DEFAULT = [f"{f}:16:{s}" for f in ("fp8_block", "int8_dynamic", "int8_weight_only", "int4_weight_only")
           for s in SHAPES]
MODULES = {"fp8_block": F, "int8_dynamic": I, "int8_weight_only": W8, "int4_weight_only": I4}


def runs(family, m, n, k):
    """{label: fn} for one cell: 'x' (as usual), 'x shared' (row stride 0) and, for the weight-only
    families, 'M = 1' (the shipped M = 1 config on the same weight)."""
    mod = MODULES[family]
    inputs = mod.make_bench_inputs(n, k, torch.bfloat16)
    cfg = tuning.get_config(family, m, n, k, module=mod)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    x_shared = x[:1].expand(m, k)
    if family in ("int8_weight_only", "int4_weight_only"):
        x1 = x[:1].contiguous()
        cfg1 = tuning.get_config(family, 1, n, k, module=mod)
        return cfg, {"x": lambda: mod.linear(x, *inputs, config=cfg),
                     "x shared": lambda: mod.linear(x_shared, *inputs, config=cfg),
                     "M = 1": lambda: mod.linear(x1, *inputs, config=cfg1)}
    assert cfg["kernel"] == "decode", cfg
    w, ws = inputs[0], inputs[1]
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    kp = ceil_div(k, 16) * 16
    if family == "fp8_block":
        codes = torch.empty(m, kp, device="cuda", dtype=F.FP8_DTYPE)[:, :k]
        scales = torch.empty(ceil_div(k, 128), m, device="cuda", dtype=torch.float32)
        F._launch_act_quant(x, codes, scales, 1, m, 128, False)
        shared = codes[:1].expand(m, k)
        return cfg, {"x": lambda: aq.launch(codes, scales, 1, m, w, ws, None, out, cfg, fp8=True, group=128),
                     "x shared": lambda: aq.launch(shared, scales, 0, m, w, ws, None, out, cfg, fp8=True,
                                                   group=128)}
    codes = torch.empty(m, kp, device="cuda", dtype=torch.int8)[:, :k]
    scales = torch.empty(m, device="cuda", dtype=torch.float32)
    I._quant_rows_into(x, codes, kp, scales, 0)
    shared = codes[:1].expand(m, k)
    return cfg, {"x": lambda: aq.launch(codes, scales, 1, 0, w, ws, None, out, cfg, fp8=False),
                 "x shared": lambda: aq.launch(shared, scales, 0, 0, w, ws, None, out, cfg, fp8=False)}


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    cells = sys.argv[2:] or DEFAULT
    print(torch.cuda.get_device_name(), torch.__version__, f"median of {rounds} alternating rounds, GPU µs",
          flush=True)
    torch.manual_seed(0)
    for cell in cells:
        family, m, shape = cell.split(":")
        n, k = (int(v) for v in shape.split("x"))
        cfg, fns = runs(family, int(m), n, k)
        order = list(fns.items())
        times = {label: [] for label in fns}
        for r in range(rounds):
            for label, fn in (order if r % 2 == 0 else order[::-1]):
                times[label].append(tuning.gpu_time_ms(fn) * 1e3)
        med = {label: sorted(v)[len(v) // 2] for label, v in times.items()}
        text = "  ".join(f"{label} {t:.2f}" for label, t in med.items())
        gain = 100 * (med["x shared"] / med["x"] - 1)
        print(f"{family} M={m} {shape}: {text}  (shared {gain:+.1f} %)  {cfg}", flush=True)


if __name__ == "__main__":
    main()
