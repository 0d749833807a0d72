"""fp8-block's activation quantization at large M, launch orders and shapes: the shipped kernel (a 2-D grid,
row blocks fastest: neighbouring programs read the same 128 columns of other rows) against a 1-D grid with
the groups fastest (neighbouring programs read neighbouring columns of the same rows) and GPP groups a
program, and a bare bf16 -> 8-bit cast of the same bytes. Codes and scales compared with the shipped
kernel's. GPU time (CUDA-graph replay, L2 flushed), median of ROUNDS alternating passes.

    PYTHONPATH=. python scripts/probe_fp8_act_quant.py [ROUNDS] [MxK ...]
"""
import os
import statistics
import sys

import torch
import triton
import triton.language as tl

from quantkit.kernels import fp8_block as F
from quantkit.kernels import tuning

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_quant_floor import _cast_kernel  # noqa: E402  (the bare cast of the same bytes)


@triton.jit
def _act_quant_1d(x_ptr, q_ptr, s_ptr, M, K, stride_xm, stride_qm, stride_sm, stride_sg, GROUPS,
                  BLOCK_M: tl.constexpr, GROUP: tl.constexpr, GPP: tl.constexpr):
    pid = tl.program_id(0)
    nb = tl.cdiv(GROUPS, GPP)
    gb = pid % nb
    pid_m = pid // nb
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = gb * GPP * GROUP + tl.arange(0, GPP * GROUP)
    mask = (offs_m[:, None] < M) & (offs_k[None, :] < K)
    x = tl.load(x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :], mask=mask, other=0.0)
    q, scale = F._quantize_rows(tl.reshape(x.to(tl.float32), [BLOCK_M * GPP, GROUP]), False, True)
    tl.store(q_ptr + offs_m[:, None].to(tl.int64) * stride_qm + offs_k[None, :],
             tl.reshape(q, [BLOCK_M, GPP * GROUP]), mask=mask)
    offs_g = gb * GPP + tl.arange(0, GPP)
    tl.store(s_ptr + offs_m[:, None] * stride_sm + offs_g[None, :] * stride_sg, tl.reshape(scale, [BLOCK_M, GPP]),
             mask=(offs_m[:, None] < M) & (offs_g[None, :] < GROUPS))


def main():
    args = sys.argv[1:]
    rounds = int(args.pop(0)) if args and args[0].isdigit() else 7
    shapes = [tuple(int(v) for v in a.split("x")) for a in args] or [(1024, 4096), (2048, 4096), (4096, 4096),
                                                                       (1024, 14336)]
    print(torch.cuda.get_device_name(), torch.__version__, f"median of {rounds} rounds, GPU µs", flush=True)
    for m, k in shapes:
        groups = triton.cdiv(k, 128)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 3
        q0 = torch.empty(m, k, device="cuda", dtype=F.FP8_DTYPE)
        s0 = torch.empty(groups, m, device="cuda", dtype=torch.float32)
        F._launch_act_quant(x, q0, s0, 1, m, 128, False)
        runs = {"shipped": lambda: F._launch_act_quant(x, q0, s0, 1, m, 128, False)}
        outs = {}
        for block_m, gpp, warps in [(64, 1, 4), (32, 2, 4), (16, 4, 4), (8, 8, 4), (16, 8, 8), (8, 16, 8),
                                    (4, 32, 8), (2, 32, 4), (1, 32, 4)]:
            if gpp > groups:
                continue
            q = torch.empty_like(q0)
            s = torch.empty_like(s0)
            grid = (triton.cdiv(m, block_m) * triton.cdiv(groups, gpp),)

            def fn(q=q, s=s, grid=grid, block_m=block_m, gpp=gpp, warps=warps):
                _act_quant_1d[grid](x, q, s, m, k, x.stride(0), q.stride(0), 1, m, groups, BLOCK_M=block_m,
                                    GROUP=128, GPP=gpp, num_warps=warps)
            fn()
            label = f"1-D, groups fastest, {block_m} rows x {gpp} groups, {warps} warps"
            outs[label] = (q, s)
            runs[label] = fn
        cast_q = torch.empty(m, k, device="cuda", dtype=torch.int8)
        runs["bare cast"] = lambda: _cast_kernel[(triton.cdiv(m * k, 4096),)](x, cast_q, m * k, BLOCK=4096,
                                                                             num_warps=16)
        torch.cuda.synchronize()
        for label, (q, s) in outs.items():
            assert torch.equal(q.view(torch.uint8), q0.view(torch.uint8)) and torch.equal(s, s0), label
        times = {label: [] for label in runs}
        for r in range(rounds):
            for label in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                times[label].append(tuning.gpu_time_ms(runs[label]) * 1e3)
        print(f"M={m} K={k} (codes and scales equal to the shipped kernel's)")
        for label, v in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
            print(f"  {statistics.median(v):7.2f}  {label}", flush=True)


if __name__ == "__main__":
    main()
