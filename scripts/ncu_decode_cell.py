"""One int4 weight-only layer call at a decode size for Nsight Compute, e.g.

    ncu --section SpeedOfLight --section WarpStateStats -k regex:decode --launch-skip 2 --launch-count 1 \
        python scripts/ncu_decode_cell.py 16 14336 4096

runs the shipped config three times (the run, the launch plan's recording, a replay) on weights ~ N(0, 0.02²).
"""
import sys

import torch

from quantkit.kernels import int4_weight_only as Q

m, n, k = (int(v) for v in sys.argv[1:4])
args = Q.make_bench_inputs(n, k)
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    Q.linear(x, *args)
torch.cuda.synchronize()
