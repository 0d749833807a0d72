"""fp8-block's cuBLAS path two ways, interleaved in one process: codes, scales and output as three
allocations with the functional ``_scaled_mm`` (round 28), against one block with ``_scaled_mm(out=...)``
(the shipped ``linear``). Eager (``do_bench``, L2 flushed) and CUDA-graph medians over rounds, and the
outputs compared bit for bit.

    python scripts/probe_cublas_out.py [--rounds 5] [--cells 14336x4096:1024,4096 ...]
"""
import argparse
import statistics

import torch
import triton.testing

from quantkit.kernels import fp8_block as fk
from quantkit.reference.common import ceil_div


def three_allocations(x, wq, ws):
    m, k = x.shape
    x_q = torch.empty(m, k, dtype=fk.FP8_DTYPE, device=x.device)
    x_s = torch.empty(ceil_div(k, 128), m, dtype=torch.float32, device=x.device)
    fk._launch_act_quant(x, x_q, x_s, 1, m, 128, False)
    return torch._scaled_mm(x_q, wq.t(), x_s.t(), ws.t(), out_dtype=x.dtype)


def graph_us(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    return triton.testing.do_bench(g.replay, warmup=25, rep=100, return_mode="median") * 1e3 / reps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cells", nargs="*", default=["4096x4096:4096", "14336x4096:1024,4096", "4096x14336:1024,4096"])
    args = p.parse_args()
    torch.manual_seed(0)
    print("torch", torch.__version__, torch.cuda.get_device_name(), flush=True)
    for cell in args.cells:
        shape, ms = cell.split(":")
        n, k = map(int, shape.split("x"))
        wq, ws = fk.quantize_weight((torch.randn(n, k, device="cuda") * 0.02).bfloat16())
        for m in map(int, ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ways = {"three allocations": lambda: three_allocations(x, wq, ws),
                    "one block, out=": lambda: fk.linear(x, wq, ws, config=fk._cublas())}
            same = torch.equal(ways["three allocations"](), ways["one block, out="]())
            eager = {name: [] for name in ways}
            graph = {name: [] for name in ways}
            for _ in range(args.rounds):
                for name, fn in ways.items():
                    eager[name].append(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3)
                    graph[name].append(graph_us(fn))
            for name in ways:
                print(f"{n}x{k} M={m:5d} {name:18s} eager {statistics.median(eager[name]):7.1f} us "
                      f"{[round(v, 1) for v in eager[name]]}  graph {statistics.median(graph[name]):7.1f} us "
                      f"{[round(v, 1) for v in graph[name]]}  bit-identical {same}", flush=True)


if __name__ == "__main__":
    main()
