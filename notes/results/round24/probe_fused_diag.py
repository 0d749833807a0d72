import sys, torch
from quantkit.kernels import fp8_block as fk, f8_gemm_sm90 as g, tuning
print(torch.cuda.get_device_name(), flush=True)
G = fk._gluon(128, 128, 8, 4, epi="tma")
F = fk._gluon(128, 128, 8, 4, epi="tma", fuse=True)
def setd(**kw):
    g._DIAG.clear(); g._DIAG.update(diag=0, xevict=""); g._DIAG.update(kw)
cells = [(4096, 4096, 4096), (1024, 4096, 4096), (4096, 4096, 14336), (1024, 14336, 4096)]
for m, n, k in cells:
    torch.manual_seed(0)
    wq, ws = fk.make_bench_inputs(n, k, torch.bfloat16)[:2]
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    variants = [
        ("cublas", {}, lambda: fk.linear(x, wq, ws, config=fk._cublas())),
        ("gluon c232", {}, lambda: fk.linear(x, wq, ws, config=G)),
        ("gluon c200", dict(cregs=200), lambda: fk.linear(x, wq, ws, config=G)),
        ("fused", {}, lambda: fk.linear(x, wq, ws, config=F)),
        ("fused evict_first", dict(xevict="evict_first"), lambda: fk.linear(x, wq, ws, config=F)),
        ("fused noquant(1)", dict(diag=1), lambda: fk.linear(x, wq, ws, config=F)),
        ("fused nopoll(2)", dict(diag=2), lambda: fk.linear(x, wq, ws, config=F)),
        ("fused neither(3)", dict(diag=3), lambda: fk.linear(x, wq, ws, config=F)),
        ("quant alone", {}, lambda: fk.quantize_act(x)),
    ]
    setd(); ref = fk.linear(x, wq, ws, config=G)
    for name, kw, fn in variants[3:5]:
        setd(**kw); assert torch.equal(fn(), ref), name
    times = {v[0]: [] for v in variants}
    for r in range(3):
        for name, kw, fn in (variants if r % 2 == 0 else variants[::-1]):
            setd(**kw); times[name].append(tuning.gpu_time_ms(fn) * 1e3)
    setd()
    print(f"M={m} N={n} K={k}", flush=True)
    for name, _, _ in variants:
        v = sorted(times[name]); print(f"   {name:20s} {v[1]:8.1f} us   ({' '.join(f'{t:.1f}' for t in times[name])})", flush=True)
