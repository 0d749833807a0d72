import subprocess, time, torch
from quantkit.kernels import fp8_block as fk, f8_gemm_sm90 as g
print(torch.cuda.get_device_name(), flush=True)
F = fk._gluon(128, 128, 8, 4, epi="tma", fuse=True)
G = fk._gluon(128, 128, 8, 4, epi="tma")
m, n, k = 4096, 4096, 4096
wq, ws = fk.make_bench_inputs(n, k, torch.bfloat16)[:2]
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
w16 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
def setd(d): g._DIAG.clear(); g._DIAG.update(diag=d, xevict="")
variants = [("bf16", 0, lambda: torch.nn.functional.linear(x, w16)),
            ("gemm only (fused neither)", 3, lambda: fk.linear(x, wq, ws, config=F)),
            ("quant only", 0, lambda: fk.quantize_act(x)),
            ("sequential gluon", 0, lambda: fk.linear(x, wq, ws, config=G)),
            ("fused nopoll", 2, lambda: fk.linear(x, wq, ws, config=F)),
            ("fused", 0, lambda: fk.linear(x, wq, ws, config=F))]
for name, d, fn0 in variants:
    setd(d)
    for _ in range(3): fn0()
    torch.cuda.synchronize()
    side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn0()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(20): fn0()
    fn = graph.replay
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_event_reasons.active",
                            "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    t0 = time.time(); calls = 0
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    while time.time() - t0 < 2.5:
        for _ in range(10): fn()
        calls += 200
        torch.cuda.synchronize()
    e1.record(); torch.cuda.synchronize()
    smi.terminate(); out = smi.communicate()[0].strip().splitlines()[6:-2]
    rows = [r.split(", ") for r in out if r.count(",") == 2]
    clk = sorted(float(r[0]) for r in rows); pw = sorted(float(r[1]) for r in rows)
    reasons = sorted(set(r[2] for r in rows))
    print(f"{name:28s} {e0.elapsed_time(e1) / calls * 1e3:7.1f} us/call  sm clock med {clk[len(clk)//2]:.0f} MHz "
          f"(min {clk[0]:.0f})  power med {pw[len(pw)//2]:.0f} W (max {pw[-1]:.0f})  reasons {reasons}", flush=True)
setd(0)
