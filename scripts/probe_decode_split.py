"""Where a decode-size layer of the recipes that quantize activations spends its time (fp8-block and
int8-dynamic, M <= 16, the shipped decode config): the whole layer, the quantization kernel alone, the
decode kernel alone on codes already written, and the two launched back to back without programmatic
dependent launch. GPU time as the sweep measures it (CUDA-graph replay, L2 flushed), the median of ROUNDS
passes in alternating order; the layer also eagerly (do_bench). The layer minus the decode kernel alone is
what a single-launch design (x quantized inside the decode kernel) could win at most.

    PYTHONPATH=. python scripts/probe_decode_split.py [ROUNDS] [FAMILY:M:NxK ...]
"""
import statistics
import sys

import torch
import triton.testing

from quantkit.kernels import aq_decode_sm90 as aq
from quantkit.kernels import fp8_block as F
from quantkit.kernels import int8_dynamic as I
from quantkit.kernels import tuning
from quantkit.reference.common import ceil_div

DEFAULT = ["fp8_block:16:4096x4096", "int8_dynamic:16:4096x4096", "fp8_block:16:14336x4096",
           "fp8_block:16:4096x14336", "fp8_block:2:4096x4096", "int8_dynamic:2:4096x4096"]


def pieces(family, m, n, k):
    mod = F if family == "fp8_block" else I
    inputs = mod.make_bench_inputs(n, k, torch.bfloat16)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    cfg = tuning.get_config(family, m, n, k, module=mod)
    assert cfg["kernel"] == "decode", cfg
    w, ws = inputs[0], inputs[1]
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    kp = ceil_div(k, 16) * 16
    if family == "fp8_block":
        groups = ceil_div(k, 128)
        codes = torch.empty(m, kp, device="cuda", dtype=F.FP8_DTYPE)[:, :k]
        scales = torch.empty(groups, m, device="cuda", dtype=torch.float32)

        def quant(pdl=False):
            F._launch_act_quant(x, codes, scales, 1, m, 128, False, launch_dependents=pdl)

        def decode(pdl=False):
            aq.launch(codes, scales, 1, m, w, ws, None, out, cfg, fp8=True, group=128, pdl=pdl)
    else:
        codes = torch.empty(m, kp, device="cuda", dtype=torch.int8)[:, :k]
        scales = torch.empty(m, device="cuda", dtype=torch.float32)

        def quant(pdl=False):
            I._quant_rows_into(x, codes, kp, scales, 0, launch_dependents=pdl)

        def decode(pdl=False):
            aq.launch(codes, scales, 1, 0, w, ws, None, out, cfg, fp8=False, pdl=pdl)

    layer = lambda: mod.linear(x, *inputs)  # noqa: E731
    ref = layer().clone()
    quant(), decode()
    assert torch.equal(out, ref), "the pieces do not reproduce the layer"
    return cfg, {
        "layer": layer,
        "quant alone": quant,
        "decode alone": decode,
        "quant + decode, no PDL": lambda: (quant(), decode()),
        "quant + decode, PDL": lambda: (quant(True), decode(True)),
    }


def main():
    args = sys.argv[1:]
    rounds = int(args.pop(0)) if args and args[0].isdigit() else 5
    print(torch.cuda.get_device_name(), torch.__version__, f"median of {rounds} alternating rounds, GPU µs", flush=True)
    for cell in args or DEFAULT:
        family, m, shape = cell.split(":")
        m = int(m)
        n, k = (int(v) for v in shape.split("x"))
        cfg, runs = pieces(family, m, n, k)
        times = {label: [] for label in runs}
        labels = list(runs)
        for r in range(rounds):
            for label in (labels if r % 2 == 0 else labels[::-1]):
                times[label].append(tuning.gpu_time_ms(runs[label]) * 1e3)
        eager = triton.testing.do_bench(runs["layer"], warmup=25, rep=100, return_mode="median") * 1e3
        med = {label: statistics.median(v) for label, v in times.items()}
        print(f"{family} M={m} {n}x{k} {cfg}")
        for label in labels:
            print(f"  {med[label]:7.2f}  {label}  (rounds {' '.join(f'{v:.2f}' for v in times[label])})")
        print(f"  {eager:7.2f}  layer, eager")
        print(f"  at most {med['layer'] - med['decode alone']:.2f} µs to win by quantizing inside the decode kernel",
              flush=True)


if __name__ == "__main__":
    main()
