"""The Gluon fp8 swap GEMM (kernels/f8_swap_sm90.py: the next K block's wgmma in flight while the
previous block's product is scaled into the sum) against the shipped Triton swap kernel at
17 <= M <= 256 on the benchmark shapes: the whole layer (`fp8_block.linear`), GPU time as the sweep
measures it (CUDA-graph replay, L2 flushed), outputs checked bit-identical to the Triton kernel with the
same tiling.

    PYTHONPATH=. python scripts/probe_fp8_swap_gluon.py [M ...]
"""
import sys

import torch

from quantkit.kernels import fp8_block as F
from quantkit.kernels import tuning

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]


def main():
    ms = [int(v) for v in sys.argv[1:]] or [128]
    torch.manual_seed(0)
    for n, k in SHAPES:
        w_q, w_s, bias = F.make_bench_inputs(n, k, torch.bfloat16)[:3]
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            base = tuning.get_config("fp8_block", m, n, k, module=F)
            t0 = tuning.gpu_time_ms(lambda: F.linear(x, w_q, w_s, bias, config=base)) * 1e3
            print(f"M={m} {n}x{k}: shipped {t0:.1f} us  {base}", flush=True)
            for split in (1, 2, 4):
                for stages in (3, 4):
                    for pdl in (False, True):
                        tri = F._swap(64, 64, 2, 4, stages, False, split_k=split, pdl=pdl)
                        glu = dict(tri, GLUON=True)
                        try:
                            y_t = F.linear(x, w_q, w_s, bias, config=tri)
                            y_g = F.linear(x, w_q, w_s, bias, config=glu)
                            same = torch.equal(y_t, y_g)
                            t_t = tuning.gpu_time_ms(lambda: F.linear(x, w_q, w_s, bias, config=tri)) * 1e3
                            t_g = tuning.gpu_time_ms(lambda: F.linear(x, w_q, w_s, bias, config=glu)) * 1e3
                            print(f"    split {split} stages {stages} pdl {int(pdl)}: triton {t_t:6.1f}  gluon {t_g:6.1f} "
                                  f"({100 * (t_g / t_t - 1):+.1f} %, vs shipped {100 * (t_g / t0 - 1):+.1f} %)  "
                                  f"{'bit-identical' if same else 'DIFFERS max %.3g' % (y_t.float() - y_g.float()).abs().max().item()}",
                                  flush=True)
                        except Exception as exc:  # noqa: BLE001
                            print(f"    split {split} stages {stages} pdl {int(pdl)}: failed {type(exc).__name__}: "
                                  f"{str(exc)[:300]}", flush=True)


if __name__ == "__main__":
    main()
