"""fp8-block's activation quantization (1 x 128 groups) at large M: launch shapes (rows a program,
warps; codes and scales checked equal to the default's), GPU µs under do_bench with L2 flushed.

    PYTHONPATH=. python scripts/probe_fp8_act_quant.py
"""
import torch
import triton.testing

from quantkit.kernels import fp8_block
from quantkit.reference.common import ceil_div

bench = lambda f: triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median") * 1e3  # noqa: E731
torch.manual_seed(0)
for k in (4096, 14336):
    for m in (128, 1024, 2048, 4096):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        q = torch.empty(m, k, dtype=torch.float8_e4m3fn, device="cuda")
        s = torch.empty(ceil_div(k, 128), m, dtype=torch.float32, device="cuda")

        def run(**kw):
            fp8_block._launch_act_quant(x, q, s, 1, m, 128, False, **kw)

        run()
        rq, rs = q.clone(), s.clone()
        rows = [("default", bench(run))]
        for bm in (8, 16, 32, 64, 128):
            for w in (1, 2, 4, 8):
                el = bm * 128 // (32 * w)
                if el < 8 or el > 128:
                    continue
                q.zero_()
                s.zero_()
                run(block_m=bm, warps=w)
                ok = torch.equal(q.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(s, rs)
                rows.append((f"bm{bm} w{w}{'' if ok else ' MISMATCH'}", bench(lambda: run(block_m=bm, warps=w))))
        rows.sort(key=lambda r: r[1])
        gbps = lambda t: (3 * m * k + 4 * m * k / 128) / t / 1e3  # noqa: E731
        print(f"M={m} K={k}: default {dict(rows)['default']:.1f} us; best: " +
              "; ".join(f"{n} {t:.1f} ({gbps(t):.0f} GB/s)" for n, t in rows[:5]), flush=True)
