"""int8-dynamic at large M: the row quantization's launch shapes (rows a program, warps, K chunk;
codes checked equal to the default's) and GEMM configs beyond the sweep's (3 vs 4 stages, GROUP_M,
BLOCK_K 64; outputs checked bit-identical), then the whole layer with and without PDL.

    PYTHONPATH=. python scripts/probe_int8_dynamic_configs.py
"""
import torch
import triton
import triton.testing
import torch.nn.functional as F
from quantkit.kernels import int8_dynamic as i8

bench = lambda f: triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median") * 1e3  # noqa: E731
torch.manual_seed(0)
print("== quant shapes (us; bytes: 3 per element)")
for K in (4096, 14336):
    for M in (1024, 2048, 4096):
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        q = torch.empty(M, K, dtype=torch.int8, device="cuda")
        s = torch.empty(M, dtype=torch.float32, device="cuda")
        ref_q = torch.empty_like(q); ref_s = torch.empty_like(s)
        i8._quant_rows_into(x, ref_q, K, ref_s, 0)
        res = [("default", bench(lambda: i8._quant_rows_into(x, q, K, s, 0)))]
        bks = [triton.next_power_of_2(K)] + ([2048, 4096] if K > 4096 else [])
        for bk in bks:
            for br in (1, 2, 4, 8):
                for w in (4, 8, 16, 32):
                    el = bk * br // (w * 32)
                    if el < 8 or el > 64 or (bk < K and br * bk > 16384):
                        continue
                    q.zero_(); s.zero_()
                    i8._quant_rows_into(x, q, K, s, 0, block_k=bk, block_r=br, warps=w)
                    ok = torch.equal(q, ref_q) and torch.equal(s, ref_s)
                    t = bench(lambda: i8._quant_rows_into(x, q, K, s, 0, block_k=bk, block_r=br, warps=w))
                    res.append((f"bk{bk} r{br} w{w}{'' if ok else ' MISMATCH'}", t))
        res.sort(key=lambda r: r[1])
        gbps = lambda t: 3 * M * K / t / 1e3  # noqa: E731
        print(f"M={M} K={K}: default {dict(res)['default']:.1f}us; best: " +
              "; ".join(f"{n} {t:.1f}us ({gbps(t):.0f} GB/s)" for n, t in res[:5]), flush=True)

print("== GEMM configs (quantized operands, us)")
cands = {
    "256x128 s3": i8._two_pass(256, 128, 128, 8, 3, mode="tma"),
    "256x128 s4": i8._two_pass(256, 128, 128, 8, 4, mode="tma"),
    "128x256 s3": i8._two_pass(128, 256, 128, 8, 3, mode="tma"),
    "128x256 s4": i8._two_pass(128, 256, 128, 8, 4, mode="tma"),
    "256x128 s4 g4": i8._two_pass(256, 128, 128, 8, 4, mode="tma", group_m=4),
    "256x128 s4 g16": i8._two_pass(256, 128, 128, 8, 4, mode="tma", group_m=16),
    "256x128 bk64 s6": i8._two_pass(256, 128, 64, 8, 6, mode="tma"),
    "pers 256x128 s3": i8._two_pass(256, 128, 128, 8, 3, mode="persistent"),
    "pers 128x256 s4": i8._two_pass(128, 256, 128, 8, 4, mode="persistent"),
    # the second probe (results/round10/probe_int8_dynamic_bk256.log)
    "256x128 s4 g2": i8._two_pass(256, 128, 128, 8, 4, mode="tma", group_m=2),
    "128x128 s6": i8._two_pass(128, 128, 128, 8, 6, mode="tma"),
    "256x128 bk256 s2": i8._two_pass(256, 128, 256, 8, 2, mode="tma"),
    "128x256 bk256 s2": i8._two_pass(128, 256, 256, 8, 2, mode="tma"),
}
for n, k in [(4096, 4096), (14336, 4096), (4096, 14336)]:
    w = (torch.randn(n, k, device="cuda") * 0.02).bfloat16()
    wq, ws = i8.quantize_weight(w)
    for m in (1024, 2048, 4096):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        xq, xs = i8.quantize_act(x)
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        ref = None
        res = []
        for name, c in cands.items():
            try:
                i8._gemm_launch(xq, k, xs, 0, wq, ws, None, out, m, n, k, c)
                if ref is None:
                    ref = out.clone()
                ok = torch.equal(out, ref)
                res.append((name + ("" if ok else " MISMATCH"), bench(lambda: i8._gemm_launch(xq, k, xs, 0, wq, ws, None, out, m, n, k, c))))
            except Exception as e:  # noqa: BLE001
                res.append((name + " FAIL " + str(e)[:80], 1e9))
        bf = bench(lambda: F.linear(x, w))
        res.sort(key=lambda r: r[1])
        print(f"{n}x{k} M={m}: bf16 {bf:.1f}; " + "; ".join(f"{a} {t:.1f}" for a, t in res), flush=True)
        for name in ("256x128 s3", "256x128 s4", "128x256 s3", "128x256 s4"):
            c = cands[name]
            lay = bench(lambda: i8.linear(x, wq, ws, config=c))
            lay_p = bench(lambda: i8.linear(x, wq, ws, config=dict(c, pdl=True)))
            print(f"   layer {name}: {lay:.1f} (pdl {lay_p:.1f})", flush=True)
