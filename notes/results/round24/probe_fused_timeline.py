import torch
from quantkit.kernels import fp8_block as fk, f8_gemm_sm90 as g
print(torch.cuda.get_device_name(), flush=True)
F = fk._gluon(128, 128, 8, 4, epi="tma", fuse=True)
cells = [(4096, 4096, 4096), (1024, 14336, 4096), (4096, 4096, 14336)]
for m, n, k in cells:
    torch.manual_seed(0)
    wq, ws = fk.make_bench_inputs(n, k, torch.bfloat16)[:2]
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    dbg = torch.zeros(132 * 4, dtype=torch.int64, device="cuda")
    for name, d in (("fused", 4), ("nopoll", 6), ("noquant", 5), ("neither", 7)):
        g._DIAG.clear(); g._DIAG.update(diag=d, xevict="", dbg=dbg)
        for _ in range(5):
            dbg.zero_(); fk.linear(x, wq, ws, config=F)
        torch.cuda.synchronize()
        t = dbg.view(132, 4).cpu().double()
        t0 = t[:, 0].min()
        qe = (t[:, 1] - t0) / 1e3; le = (t[:, 2] - t0) / 1e3; qs = (t[:, 0] - t0) / 1e3
        print(f"M={m} N={n} K={k} {name:8s}: quant start max {qs.max():6.1f}  quant end med {qe.median():6.1f} "
              f"max {qe.max():6.1f}  load end med {le.median():6.1f} max {le.max():6.1f} us", flush=True)
    g._DIAG.clear(); g._DIAG.update(diag=0, xevict="")
