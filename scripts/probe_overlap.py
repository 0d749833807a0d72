"""int8-dynamic's overlapped path (``overlap`` two-pass config: the row quantization running beside the
GEMM, tiles waiting per row block) against the plain TMA path with the same tiles: outputs compared
bitwise, then eager do_bench µs of each (L2 flushed).

    PYTHONPATH=. python scripts/probe_overlap.py
"""
import torch
import triton.testing

from quantkit.kernels import int8_dynamic as ik

bench = lambda f: triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median") * 1e3  # noqa: E731
torch.manual_seed(0)
cfg = ik._two_pass(128, 256, 128, 8, 4, mode="tma", overlap=True)
plain = {k: v for k, v in cfg.items() if k != "overlap"}
for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
    w = (torch.randn(n, k, device="cuda") * 0.02).bfloat16()
    wq, ws = ik.quantize_weight(w)
    for m in (1024, 2048, 4096):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        y = ik.linear(x, wq, ws, config=cfg)
        y0 = ik.linear(x, wq, ws, config=plain)
        same = torch.equal(y, y0)
        tp = bench(lambda: ik.linear(x, wq, ws, config=plain))
        to = bench(lambda: ik.linear(x, wq, ws, config=cfg))
        print(f"{n}x{k} M={m}: same={same} plain {tp:.1f} us overlap {to:.1f} us ({100*(to/tp-1):+.1f} %)", flush=True)
