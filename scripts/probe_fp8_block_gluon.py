"""The Gluon fp8 block-scaled GEMM (kernels/f8_gemm_sm90.py: the next K block's wgmma in flight while
the last one's product is scaled) against cuBLAS's block-scaled GEMM (``torch._scaled_mm``, the shipped
M > 256 path) and the Triton tiled GEMM, at M = 1024-4096 on the benchmark shapes: the GEMM alone on
the same codes and the whole layer (``fp8_block.linear``), GPU time as the sweep measures it (CUDA-graph
replay, L2 flushed). Outputs are checked bit for bit against the Triton tiled GEMM (same numerics),
first at odd shapes, dtypes and with a bias.

    PYTHONPATH=. python scripts/probe_fp8_block_gluon.py [M ...] [--no-check] [--epi]

``--epi``: the GEMM with its output tiles stored by TMA (``epi="tma"``) against row stores.
"""
import sys
import traceback

import torch

from quantkit.kernels import fp8_block as F
from quantkit.kernels import tuning

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]
TILED = F._tiled(128, 128, 8, 4, True)


def variants():
    g = F._gluon
    if "--epi" in sys.argv:
        return [g(128, 128, 8, 4), g(128, 128, 8, 4, epi="tma"), g(128, 128, 8, 5, epi="tma"),
                g(128, 128, 8, 4, pdl=True), g(128, 128, 8, 4, pdl=True, epi="tma"),
                g(128, 128, 8, 5, pdl=True, epi="tma"), g(128, 128, 8, 4, group_m=16, epi="tma")]
    return [g(128, 128, 8, 4), g(128, 128, 8, 5), g(128, 128, 8, 5, pdl=True), g(128, 128, 8, 5, group_m=16),
            g(128, 128, 8, 5, group_m=4)]


def check():
    torch.manual_seed(1)
    bad = 0
    for m, n, k, dtype, bias in [(1000, 4000, 4224, torch.bfloat16, True), (333, 4096, 4000, torch.float16, False),
                                 (1024, 4096, 4096, torch.float32, True), (77, 384, 256, torch.bfloat16, False),
                                 (1024, 4096, 1000, torch.bfloat16, False), (4096, 1024, 128, torch.bfloat16, True)]:
        w = (torch.randn(n, k, device="cuda") * 0.02).to(dtype)
        w_q, w_s = F.quantize_weight(w)
        b = torch.randn(n, device="cuda").to(dtype) if bias else None
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        x_q, x_s = F.quantize_act(x)
        ref = F.gemm(x_q, x_s, w_q, w_s, b, out_dtype=dtype, config=TILED)
        ref_l = F.linear(x, w_q, w_s, b, config=TILED)
        for cfg in (F._gluon(128, 128, 8, 4), F._gluon(128, 64, 8, 6), F._gluon(128, 128, 8, 5, pdl=True)):
            y = F.gemm(x_q, x_s, w_q, w_s, b, out_dtype=dtype, config=cfg)
            y_l = F.linear(x, w_q, w_s, b, config=cfg)
            same = torch.equal(y, ref) and torch.equal(y_l, ref_l)
            bad += not same
            d = (y.float() - ref.float()).abs().max().item()
            print(f"check M={m} N={n} K={k} {dtype} bias={bias} {cfg}: {'bit-identical' if same else f'DIFFERS max {d}'}",
                  flush=True)
    print("check:", "all bit-identical" if not bad else f"{bad} DIFFER", flush=True)


def main():
    ms = [int(v) for v in sys.argv[1:] if v.isdigit()] or [1024, 2048, 4096]
    if "--no-check" not in sys.argv:
        check()
    torch.manual_seed(0)
    for n, k in SHAPES:
        w_q, w_s, bias, _, _ = F.make_bench_inputs(n, k)
        w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            x_q, x_sk = F.quantize_act(x)
            x_s = x_sk.t().contiguous().t()  # K-major, as linear() writes them
            flop = 2 * m * n * k
            t_bf16 = tuning.gpu_time_ms(lambda: torch.nn.functional.linear(x, w)) * 1e3
            t_cub = tuning.gpu_time_ms(lambda: torch._scaled_mm(x_q, w_q.t(), x_s, w_s.t(), out_dtype=torch.bfloat16)) * 1e3
            t_cub_l = tuning.gpu_time_ms(lambda: F.linear(x, w_q, w_s, config=F._cublas())) * 1e3
            y_cub = torch._scaled_mm(x_q, w_q.t(), x_s, w_s.t(), out_dtype=torch.bfloat16)
            t_tiled = tuning.gpu_time_ms(lambda: F.gemm(x_q, x_s, w_q, w_s, config=TILED)) * 1e3
            ref = F.gemm(x_q, x_s, w_q, w_s, config=TILED)
            print(f"M={m} {n}x{k}: bf16 {t_bf16:.1f} us; cuBLAS fp8 gemm {t_cub:.1f} us ({flop / t_cub / 1e6:.0f} TF), "
                  f"layer {t_cub_l:.1f} ({t_bf16 / t_cub_l:.2f}x bf16); tiled gemm {t_tiled:.1f}; "
                  f"cuBLAS vs tiled max |d| {(y_cub.float() - ref.float()).abs().max().item():.3g}", flush=True)
            for cfg in variants():
                try:
                    y = F.gemm(x_q, x_s, w_q, w_s, config=cfg)
                    same = torch.equal(y, ref)
                    t_g = tuning.gpu_time_ms(lambda: F.gemm(x_q, x_s, w_q, w_s, config=cfg)) * 1e3
                    t_l = tuning.gpu_time_ms(lambda: F.linear(x, w_q, w_s, config=cfg)) * 1e3
                    print(f"    gemm {t_g:7.1f} us ({flop / t_g / 1e6:5.0f} TF, {100 * (t_g / t_cub - 1):+.1f} % vs cuBLAS)"
                          f"  layer {t_l:7.1f} ({t_bf16 / t_l:.2f}x bf16, {100 * (t_l / t_cub_l - 1):+.1f} %)  "
                          f"{'bit-identical' if same else 'DIFFERS'}  {cfg['BLOCK_M']}x{cfg['BLOCK_N']} "
                          f"s{cfg['num_stages']} w{cfg['num_warps']} pdl={cfg.get('PDL', False)} G{cfg['GROUP_M']} "
                          f"epi={cfg.get('EPI', 'rows')}",
                          flush=True)
                except Exception as exc:  # noqa: BLE001
                    if "-v" in sys.argv:
                        traceback.print_exc()
                    print(f"    failed {type(exc).__name__}: {str(exc)[:300]}  {cfg}", flush=True)


if __name__ == "__main__":
    main()
