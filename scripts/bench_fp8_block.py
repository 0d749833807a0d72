"""Where the time of the fp8_block forward goes, per benchmark cell and candidate config (GPU only).

    python scripts/bench_fp8_block.py [--cells 1,16,128,1024,4096] [--out FILE.json]

For every cell of PERFORMANCE.md and every candidate config it prints the eager time (as the sweep
measures it: host launch cost included wherever it exceeds do_bench's L2 flush), the time of the same
call replayed from a CUDA graph (GPU only), for two-launch configs the activation-quantization pass
alone, and the achieved weight GB/s or TFLOP/s of the graph time. All timings: do_bench medians with L2
flushed, so the next round can tell host cost, pass cost and GEMM cost apart.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import quantkit.kernels.fp8_block as fk  # noqa: E402
from quantkit.kernels.tuning import BENCH_M, LLAMA_SHAPES  # noqa: E402


def _bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median") * 1000.0


def _graph_time(fn) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return _bench(graph.replay)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default=",".join(str(m) for m in BENCH_M), help="comma-separated M values")
    parser.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = parser.parse_args()
    ms = [int(v) for v in args.cells.split(",")]
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}")
    rows = []
    for n, k in LLAMA_SHAPES:
        weight_q, weight_scale, bias, block, fmt = fk.make_bench_inputs(n, k)
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            bf16_w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            bf16 = _graph_time(lambda: torch.nn.functional.linear(x, bf16_w))
            del bf16_w
            pass_us = None
            if any(not c["fuse_act_quant"] for c in fk.candidate_configs(m, n, k)):
                xq = torch.empty(m, k, dtype=fk.FP8_DTYPE, device="cuda")
                xs = torch.empty(triton.cdiv(k, block), m, dtype=torch.float32, device="cuda")
                pass_us = _graph_time(lambda: fk._launch_act_quant(x, xq, xs, 1, m, block, False))
            for config in fk.candidate_configs(m, n, k):
                fn = lambda: fk.linear(x, weight_q, weight_scale, bias, block, fmt, config=config)  # noqa: E731
                try:
                    eager = _bench(fn)
                    graph = _graph_time(fn)
                except Exception as exc:  # noqa: BLE001 - report and go on
                    print(f"{n}x{k} M={m} {config}: failed ({exc.__class__.__name__}: {exc})")
                    continue
                tflops = 2.0 * m * n * k / graph / 1e6
                gbs = (n * k + m * k * 2 + m * n * 2) / graph / 1e3
                row = {"N": n, "K": k, "M": m, "config": config, "eager_us": eager, "graph_us": graph,
                       "quant_pass_us": None if config["fuse_act_quant"] else pass_us, "bf16_graph_us": bf16}
                rows.append(row)
                passed = "" if config["fuse_act_quant"] else f"  pass {pass_us:6.1f}"
                print(f"{n:5d}x{k:<5d} M={m:<4d} eager {eager:7.1f}  graph {graph:7.1f}{passed}  "
                      f"bf16 {bf16:7.1f}  x{bf16 / graph:4.2f}  {tflops:7.1f} TFLOP/s {gbs:6.0f} GB/s  {config}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
