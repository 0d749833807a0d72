"""Run one int4/int8 M=1 config a few times (for ncu; temporary)."""
import json, sys, torch
from quantkit.kernels import int4_weight_only as k4, int8_weight_only as k8
fam, N, K, M, cfg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
if fam == "int4":
    packed, scale, zero, bias, g = k4.make_bench_inputs(N, K)
    fn = lambda: k4.linear(x, packed, scale, zero, None, g, config=cfg)
else:
    wq, ws, b = k8.make_bench_inputs(N, K, torch.bfloat16)[:3]
    fn = lambda: k8.linear(x, wq, ws, None, config=cfg)
for _ in range(4):
    fn()
torch.cuda.synchronize()
