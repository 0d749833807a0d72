"""The Gluon GEMMs launched as programmatic dependents of the quantization, with the first ring-full of weight tiles
requested before the grid wait (``WEIGHT_FIRST``, shipped) or after it (as before): GPU time as the sweep measures it
(CUDA-graph replay, L2 flushed), ROUNDS alternating rounds, median, the two outputs compared bit for bit.

    PYTHONPATH=. python scripts/probe_weight_first.py ROUNDS CELL [CELL ...]

CELL: ``family:M:NxK`` runs the shipped config of that cell (it must launch a Gluon GEMM with PDL to differ);
``family:M:NxK:pdl`` the shipped config with PDL switched on (for cells whose table entry has it off).
"""
import importlib
import statistics
import sys

import torch

from quantkit.kernels import f8_gemm_sm90, i8_gemm_sm90, tuning


def _with_pdl(family, config):
    return dict(config, PDL=True) if family == "fp8_block" else dict(config, pdl=True)


def main():
    rounds, cells = int(sys.argv[1]), sys.argv[2:]
    print(torch.cuda.get_device_name(), torch.__version__, f"median of {rounds} alternating rounds, GPU µs", flush=True)
    torch.manual_seed(0)
    for cell in cells:
        family, m, shape, *opt = cell.split(":")
        m = int(m)
        n, k = (int(v) for v in shape.split("x"))
        mod = importlib.import_module(f"quantkit.kernels.{family}")
        inputs = mod.make_bench_inputs(n, k, torch.bfloat16)
        dense = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        config = tuning.get_config(family, m, n, k, module=mod)
        if opt == ["pdl"]:
            config = _with_pdl(family, config)

        def run(first, config=config, x=x, inputs=inputs, mod=mod):
            f8_gemm_sm90.WEIGHT_FIRST = i8_gemm_sm90.WEIGHT_FIRST = first
            return mod.linear(x, *inputs, config=config)

        same = torch.equal(run(True), run(False))
        runs = [("bf16", lambda x=x, w=dense: torch.nn.functional.linear(x, w)),
                ("weight first", lambda: run(True)), ("wait first", lambda: run(False))]
        times = {name: [] for name, _ in runs}
        for r in range(rounds):
            for name, fn in (runs if r % 2 == 0 else runs[::-1]):
                times[name].append(tuning.gpu_time_ms(fn) * 1e3)
        med = {name: statistics.median(t) for name, t in times.items()}
        print(f"{cell}: bf16 {med['bf16']:.1f}  wait first {med['wait first']:.1f}  weight first "
              f"{med['weight first']:.1f} ({med['weight first'] / med['wait first'] - 1:+.1%}; "
              f"{med['bf16'] / med['weight first']:.2f}x of bf16)  bit-identical {same}  {config}", flush=True)
    f8_gemm_sm90.WEIGHT_FIRST = i8_gemm_sm90.WEIGHT_FIRST = True


if __name__ == "__main__":
    main()
