"""The warp-specialized persistent GEMMs (int8-dynamic's ``gluon_ws``, fp8-block's ``gluon``) with their
output tiles stored by TMA (``EPI="tma"``: the copy engine writes a tile while the consumers run the next
tile's K loop) against the same kernels storing rows from registers, and against the shipped config, at
M = 1024-4096 on the benchmark shapes. GEMM alone on the same codes and the whole layer, GPU time as the
sweep measures it (CUDA-graph replay, L2 flushed). Every output is compared bit for bit with the shipped
config's (int8: every config; fp8: the Gluon configs against the Triton tiled GEMM).

    PYTHONPATH=. python scripts/probe_tma_epilogue.py [int8|fp8 ...] [M ...]
"""
import sys
import traceback

import torch

from quantkit.kernels import fp8_block as F
from quantkit.kernels import int8_dynamic as A
from quantkit.kernels import tuning

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]


def int8_variants():
    w = lambda *a, **kw: A._two_pass(*a, mode="gluon_ws", **kw)  # noqa: E731
    return [w(128, 256, 128, 8, 3), w(128, 256, 128, 8, 3, epi="tma"), w(256, 128, 128, 8, 3, epi="tma"),
            w(128, 128, 128, 8, 5), w(128, 128, 128, 8, 5, epi="tma"), w(128, 128, 128, 8, 4, epi="tma"),
            w(128, 256, 128, 8, 3, epi="tma", pdl=True), w(128, 256, 128, 8, 3, epi="tma", group_m=16)]


def fp8_variants():
    g = F._gluon
    return [g(128, 128, 8, 4), g(128, 128, 8, 4, epi="tma"), g(128, 128, 8, 5, epi="tma"),
            g(128, 128, 8, 4, pdl=True), g(128, 128, 8, 4, pdl=True, epi="tma"), g(128, 128, 8, 5, pdl=True, epi="tma"),
            g(128, 128, 8, 4, group_m=16, epi="tma")]


def _row(label, t_g, t_l, flop, t_g0, t_l0, same):
    return (f"    {label:<58} gemm {t_g:7.1f} us ({flop / t_g / 1e6:5.0f} T/s, {100 * (t_g / t_g0 - 1):+6.1f} %)  "
            f"layer {t_l:7.1f} us ({100 * (t_l / t_l0 - 1):+6.1f} %)  {'bit-identical' if same else 'DIFFERS'}")


def run_int8(ms):
    for n, k in SHAPES:
        w_q, w_s, bias = A.make_bench_inputs(n, k, torch.bfloat16)
        w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            x_q, x_s = A.quantize_act(x)
            base = tuning.get_config("int8_dynamic", m, n, k, module=A)
            ref_g = A.gemm(x_q, x_s, w_q, w_s, bias, config=base)
            ref_l = A.linear(x, w_q, w_s, bias, config=base)
            t_bf = tuning.gpu_time_ms(lambda: torch.nn.functional.linear(x, w)) * 1e3
            t_g0 = tuning.gpu_time_ms(lambda: A.gemm(x_q, x_s, w_q, w_s, bias, config=base)) * 1e3
            t_l0 = tuning.gpu_time_ms(lambda: A.linear(x, w_q, w_s, bias, config=base)) * 1e3
            flop = 2 * m * n * k
            print(f"int8 M={m} {n}x{k}: bf16 {t_bf:.1f} us; shipped gemm {t_g0:.1f} us ({flop / t_g0 / 1e6:.0f} T/s), "
                  f"layer {t_l0:.1f} ({t_bf / t_l0:.2f}x bf16)  {base}", flush=True)
            for cfg in int8_variants():
                try:
                    y_g = A.gemm(x_q, x_s, w_q, w_s, bias, config=cfg)
                    y_l = A.linear(x, w_q, w_s, bias, config=cfg)
                    same = torch.equal(y_g, ref_g) and torch.equal(y_l, ref_l)
                    t_g = tuning.gpu_time_ms(lambda: A.gemm(x_q, x_s, w_q, w_s, bias, config=cfg)) * 1e3
                    t_l = tuning.gpu_time_ms(lambda: A.linear(x, w_q, w_s, bias, config=cfg)) * 1e3
                    label = f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']} s{cfg['num_stages']} g{cfg['GROUP_M']} " \
                            f"pdl={int(cfg['pdl'])} epi={cfg.get('EPI', 'rows')}"
                    print(_row(label, t_g, t_l, flop, t_g0, t_l0, same) + f"  ({t_bf / t_l:.2f}x bf16)", flush=True)
                except Exception:
                    print(f"    {cfg}: FAILED\n{traceback.format_exc()}", flush=True)


def run_fp8(ms):
    tiled = F._tiled(128, 128, 8, 4, True)
    for n, k in SHAPES:
        w_q, w_s, bias, _, _ = F.make_bench_inputs(n, k)
        w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            x_q, x_sk = F.quantize_act(x)
            x_s = x_sk.t().contiguous().t()  # K-major, as linear() writes them
            base = tuning.get_config("fp8_block", m, n, k, module=F)
            ref = F.gemm(x_q, x_s, w_q, w_s, config=tiled)
            ref_l = F.linear(x, w_q, w_s, config=tiled)
            t_bf = tuning.gpu_time_ms(lambda: torch.nn.functional.linear(x, w)) * 1e3
            t_g0 = tuning.gpu_time_ms(lambda: F.gemm(x_q, x_s, w_q, w_s, config=base)) * 1e3
            t_l0 = tuning.gpu_time_ms(lambda: F.linear(x, w_q, w_s, config=base)) * 1e3
            flop = 2 * m * n * k
            print(f"fp8 M={m} {n}x{k}: bf16 {t_bf:.1f} us; shipped gemm {t_g0:.1f} us ({flop / t_g0 / 1e6:.0f} T/s), "
                  f"layer {t_l0:.1f} ({t_bf / t_l0:.2f}x bf16)  {base}", flush=True)
            for cfg in fp8_variants():
                try:
                    y = F.gemm(x_q, x_s, w_q, w_s, config=cfg)
                    y_l = F.linear(x, w_q, w_s, config=cfg)
                    same = torch.equal(y, ref) and torch.equal(y_l, ref_l)
                    t_g = tuning.gpu_time_ms(lambda: F.gemm(x_q, x_s, w_q, w_s, config=cfg)) * 1e3
                    t_l = tuning.gpu_time_ms(lambda: F.linear(x, w_q, w_s, config=cfg)) * 1e3
                    label = f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']} s{cfg['num_stages']} g{cfg['GROUP_M']} " \
                            f"pdl={int(bool(cfg.get('PDL')))} epi={cfg.get('EPI', 'rows')}"
                    print(_row(label, t_g, t_l, flop, t_g0, t_l0, same) + f"  ({t_bf / t_l:.2f}x bf16)", flush=True)
                except Exception:
                    print(f"    {cfg}: FAILED\n{traceback.format_exc()}", flush=True)


def main():
    ms = [int(v) for v in sys.argv[1:] if v.isdigit()] or [1024, 4096]
    families = [v for v in sys.argv[1:] if v in ("int8", "fp8")] or ["int8", "fp8"]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    torch.manual_seed(0)
    if "int8" in families:
        run_int8(ms)
    if "fp8" in families:
        run_fp8(ms)


if __name__ == "__main__":
    main()
