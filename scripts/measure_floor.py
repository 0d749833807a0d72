"""The measurement floor on this GPU: what ``do_bench`` (L2 flushed before each call, as the layer
benchmark times) reports for a kernel that moves almost nothing, eager and replayed from a CUDA
graph, and the copy bandwidth. A layer that streams B bytes cannot time below about
floor + B / bandwidth, which bounds the speedup any kernel can show over bf16 in a cell.

    python scripts/measure_floor.py
"""
import torch
import triton
import triton.language as tl
import triton.testing


@triton.jit
def _touch(p, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(p + o, tl.load(p + o, mask=o < n) + 1, mask=o < n)


def main() -> None:
    buf = torch.zeros(1 << 20, device="cuda")
    for progs in (1, 132, 528):
        n = progs * 256

        def fn(progs=progs, n=n):
            _touch[(progs,)](buf, n, BLOCK=256)

        fn()
        torch.cuda.synchronize()
        eager = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        replay = triton.testing.do_bench(graph.replay, warmup=25, rep=100, return_mode="median") * 1e3
        print(f"touch kernel, {progs} programs x 1 KB: eager {eager:.1f} us, CUDA-graph replay {replay:.1f} us")
    for nbytes in (8 << 20, 32 << 20, 128 << 20):
        a = torch.empty(nbytes // 2, device="cuda", dtype=torch.bfloat16)
        b = torch.empty_like(a)
        t = triton.testing.do_bench(lambda a=a, b=b: b.copy_(a), warmup=25, rep=100, return_mode="median") * 1e3
        print(f"copy {nbytes >> 20} MB -> {nbytes >> 20} MB: {t:.1f} us, {2 * nbytes / t / 1e3:.0f} GB/s read + write")


if __name__ == "__main__":
    main()
