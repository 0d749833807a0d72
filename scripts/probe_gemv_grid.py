"""A wider grid of int8 weight-only M = 1 configs than the sweep's eight (GEMV tiles and stage counts, the
Gluon decode kernel), GPU time as the sweep measures it (CUDA-graph replay, L2 flushed), against bf16
``F.linear`` in the same run; outputs checked against the shipped config's.

    PYTHONPATH=. python scripts/probe_gemv_grid.py [NxK ...]
"""
import sys

import torch

from quantkit.kernels import int8_weight_only as W
from quantkit.kernels import tuning


def grid():
    out = []
    for bn, bk in [(2, 2048), (4, 1024), (4, 2048), (8, 256), (8, 512), (8, 1024), (16, 256), (16, 512), (32, 256)]:
        for warps in (4, 8):
            if bn * bk // (32 * warps) < 16:  # under 16 bytes a thread: no 16-byte loads
                continue
            for stages in (1, 2, 3, 4):
                out.append(W._gemv_config(bn, bk, warps, stages))
    for mt, wk, sub in [(1, 4, 1), (1, 8, 1), (1, 8, 2), (1, 2, 1), (1, 4, 2), (2, 4, 1)]:
        out.append(W._decode_config(mt, wk, sub=sub))
        out.append(W._decode_config(mt, wk, sub=sub, xpf=False))
    return out


def main():
    shapes = [tuple(int(v) for v in a.split("x")) for a in sys.argv[1:]] or [(4096, 4096)]
    torch.manual_seed(0)
    for n, k in shapes:
        w_q, w_s, bias = W.make_bench_inputs(n, k, torch.bfloat16)
        w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        shipped = W.linear(x, w_q, w_s, bias)
        t_bf16 = tuning.gpu_time_ms(lambda: torch.nn.functional.linear(x, w)) * 1e3
        t_ship = tuning.gpu_time_ms(lambda: W.linear(x, w_q, w_s, bias)) * 1e3
        print(f"{n}x{k} M=1: bf16 {t_bf16:.2f} us; shipped {t_ship:.2f} us ({t_bf16 / t_ship:.2f}x)", flush=True)
        rows = []
        for cfg in grid():
            try:
                y = W.linear(x, w_q, w_s, bias, config=cfg)
                d = (y.float() - shipped.float()).abs().max().item()
                t = tuning.gpu_time_ms(lambda: W.linear(x, w_q, w_s, bias, config=cfg)) * 1e3
                rows.append((t, cfg, d))
            except Exception as exc:  # noqa: BLE001
                print(f"  failed {type(exc).__name__}: {str(exc)[:200]} {cfg}", flush=True)
        for t, cfg, d in sorted(rows, key=lambda r: r[0]):
            print(f"  {t:6.2f} us ({t_bf16 / t:.2f}x)  max|d| vs shipped {d:.3g}  {cfg}", flush=True)


if __name__ == "__main__":
    main()
