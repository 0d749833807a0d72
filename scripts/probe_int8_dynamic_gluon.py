"""The Gluon int8 GEMM (kernels/i8_gemm_sm90.py: wgmma kept in flight across K steps) against the
shipped Triton two-pass GEMM at M = 128-4096 on the benchmark shapes: the GEMM alone on the same codes
(`int8_dynamic.gemm`) and the whole layer (`int8_dynamic.linear`), GPU time as the sweep measures it
(CUDA-graph replay, L2 flushed), outputs checked bit-identical to the shipped config's.

    PYTHONPATH=. python scripts/probe_int8_dynamic_gluon.py [M ...] [--two-per-sm | --group | --ws | --epi]

``--ws``: the warp-specialized persistent variant (mode ``gluon_ws``) at several tiles and stage counts;
``--epi``: that variant with its output tiles stored by TMA (``epi="tma"``) against row stores.
"""
import sys
import traceback

import torch

from quantkit.kernels import int8_dynamic as A
from quantkit.kernels import tuning

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]


def gluon_variants(m):
    g = lambda *a, **kw: A._two_pass(*a, mode="gluon", **kw)  # noqa: E731
    if m <= 256:
        return [g(128, 128, 128, 8, 4), g(128, 128, 128, 8, 5), g(64, 128, 128, 4, 4), g(128, 128, 128, 8, 4, pdl=True),
                g(128, 256, 128, 8, 4)]
    if "--epi" in sys.argv:  # the warp-specialized GEMM's output by TMA stores, against its row stores
        w = lambda *a, **kw: A._two_pass(*a, mode="gluon_ws", **kw)  # noqa: E731
        return [w(128, 256, 128, 8, 3), w(128, 256, 128, 8, 3, epi="tma"), w(256, 128, 128, 8, 3, epi="tma"),
                w(128, 128, 128, 8, 5), w(128, 128, 128, 8, 5, epi="tma"), w(128, 128, 128, 8, 4, epi="tma"),
                w(128, 256, 128, 8, 3, epi="tma", pdl=True), w(128, 256, 128, 8, 3, epi="tma", group_m=16)]
    if "--ws" in sys.argv:
        w = lambda *a, **kw: A._two_pass(*a, mode="gluon_ws", **kw)  # noqa: E731
        return [w(128, 256, 128, 8, 3), w(256, 128, 128, 8, 3), w(128, 128, 128, 8, 5), w(128, 128, 128, 8, 4),
                w(128, 128, 128, 8, 5, pdl=True)]
    if "--group" in sys.argv:  # the grouped launch order's group height
        return [g(128, 256, 128, 8, 4, group_m=gm) for gm in (4, 8, 16, 32)] + \
               [g(256, 128, 128, 8, 4, group_m=gm) for gm in (4, 16)]
    if "--two-per-sm" in sys.argv:  # 128 x 128 tiles in <= 113 KB: two programs an SM
        return [g(128, 256, 128, 8, 4), g(128, 128, 128, 8, 3), g(128, 128, 128, 8, 2), g(128, 128, 64, 8, 6),
                g(128, 128, 64, 8, 4), g(128, 128, 128, 8, 3, pdl=True)]
    return [g(128, 256, 128, 8, 4), g(256, 128, 128, 8, 4), g(128, 256, 128, 8, 3), g(128, 128, 128, 8, 6),
            g(128, 256, 64, 8, 6), g(128, 256, 128, 8, 4, pdl=True), g(256, 128, 128, 8, 4, pdl=True)]


def main():
    ms = [int(v) for v in sys.argv[1:] if v.isdigit()] or [128, 1024, 2048, 4096]
    torch.manual_seed(0)
    for n, k in SHAPES:
        w_q, w_s, bias = A.make_bench_inputs(n, k, torch.bfloat16)
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            x_q, x_s = A.quantize_act(x)
            base = tuning.get_config("int8_dynamic", m, n, k, module=A)
            ref_g = A.gemm(x_q, x_s, w_q, w_s, bias, config=base)
            ref_l = A.linear(x, w_q, w_s, bias, config=base)
            t_g0 = tuning.gpu_time_ms(lambda: A.gemm(x_q, x_s, w_q, w_s, bias, config=base)) * 1e3
            t_l0 = tuning.gpu_time_ms(lambda: A.linear(x, w_q, w_s, bias, config=base)) * 1e3
            tops = 2 * m * n * k / (t_g0 * 1e-6) / 1e12
            print(f"M={m} {n}x{k}: shipped gemm {t_g0:.1f} us ({tops:.0f} TOP/s), layer {t_l0:.1f} us  {base}",
                  flush=True)
            for cfg in gluon_variants(m):
                try:
                    y_g = A.gemm(x_q, x_s, w_q, w_s, bias, config=cfg)
                    y_l = A.linear(x, w_q, w_s, bias, config=cfg)
                    same = torch.equal(y_g, ref_g) and torch.equal(y_l, ref_l)
                    t_g = tuning.gpu_time_ms(lambda: A.gemm(x_q, x_s, w_q, w_s, bias, config=cfg)) * 1e3
                    t_l = tuning.gpu_time_ms(lambda: A.linear(x, w_q, w_s, bias, config=cfg)) * 1e3
                    tops = 2 * m * n * k / (t_g * 1e-6) / 1e12
                    print(f"    gemm {t_g:7.1f} us ({tops:5.0f} TOP/s, {100 * (t_g / t_g0 - 1):+.1f} %)  layer {t_l:7.1f} "
                          f"({100 * (t_l / t_l0 - 1):+.1f} %)  {'bit-identical' if same else 'DIFFERS'}  "
                          f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} s{cfg['num_stages']} "
                          f"w{cfg['num_warps']} pdl={cfg['pdl']} G{cfg['GROUP_M']} {cfg['mode']} "
                          f"epi={cfg.get('EPI', 'rows')}", flush=True)
                except Exception as exc:  # noqa: BLE001
                    if "-v" in sys.argv:
                        traceback.print_exc()
                    print(f"    failed {type(exc).__name__}: {str(exc)[:200]}  {cfg}", flush=True)


if __name__ == "__main__":
    main()
