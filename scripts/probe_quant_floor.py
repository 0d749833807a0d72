"""How far the large-M activation quantization kernels are from the bytes they move: int8-dynamic's row
quantization and fp8-block's 1×128 group quantization against an elementwise kernel that reads the same
bf16 x and writes the same int8 bytes with no reduction (the floor for that traffic), and torch's own
bf16 -> int8 cast. GPU time as the sweep measures it (CUDA-graph replay, L2 flushed), median of ROUNDS.

    PYTHONPATH=. python scripts/probe_quant_floor.py [ROUNDS] [MxK ...]
"""
import statistics
import sys

import torch
import triton
import triton.language as tl

from quantkit.kernels import fp8_block as F
from quantkit.kernels import int8_dynamic as I
from quantkit.kernels import tuning


@triton.jit
def _cast_kernel(x_ptr, q_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(q_ptr + offs, (x * 16.0).to(tl.int8), mask=mask)


def main():
    args = sys.argv[1:]
    rounds = int(args.pop(0)) if args and args[0].isdigit() else 5
    shapes = [tuple(int(v) for v in a.split("x")) for a in args] or [(4096, 4096), (4096, 14336), (1024, 14336),
                                                                       (2048, 4096)]
    print(torch.cuda.get_device_name(), torch.__version__, f"median of {rounds} rounds, GPU µs", flush=True)
    for m, k in shapes:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        q8 = torch.empty(m, k, device="cuda", dtype=torch.int8)
        s8 = torch.empty(m, device="cuda", dtype=torch.float32)
        qf = torch.empty(m, k, device="cuda", dtype=F.FP8_DTYPE)
        sf = torch.empty(triton.cdiv(k, 128), m, device="cuda", dtype=torch.float32)
        runs = {
            "int8-dynamic row quantization": lambda: I._quant_rows_into(x, q8, k, s8, 0),
            "fp8-block group quantization": lambda: F._launch_act_quant(x, qf, sf, 1, m, 128, False),
        }
        for block in (1024, 4096, 8192):
            runs[f"cast kernel, {block} a program"] = (
                lambda block=block: _cast_kernel[(triton.cdiv(m * k, block),)](x, q8, m * k, BLOCK=block,
                                                                                num_warps=min(16, block // 256)))
        runs["torch cast (q.copy_(x))"] = lambda: q8.copy_(x)
        times = {label: [] for label in runs}
        for r in range(rounds):
            for label in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                times[label].append(tuning.gpu_time_ms(runs[label]) * 1e3)
        mb = m * k * 3 / 1e6
        print(f"M={m} K={k}: {mb:.1f} MB moved (bf16 in, 8-bit out)")
        for label, v in times.items():
            med = statistics.median(v)
            print(f"  {med:7.2f} µs  {mb / med:5.2f} TB/s  {label}", flush=True)


if __name__ == "__main__":
    main()
