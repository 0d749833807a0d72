"""Is a large-M 8-bit layer bound by the H100's power cap or by its tile waves, under the benchmark's own timer?

Two measurements, for one family at M x K (default int8_dynamic, 4096 x 4096):

1. **Clock and power while `do_bench` runs** (L2 flushed before each call, as `quantkit bench layers` times):
   `nvidia-smi --query-gpu=clocks.sm,power.draw -lms 20` samples in the background while each workload loops for
   SECONDS; the median SM clock and power of the samples taken while it ran are printed. Workloads: bf16
   `F.linear` and the shipped layer (called unplanned, so its host time can leave the GPU idle between calls)
   under `do_bench` (flush between calls) and back to back; then each from CUDA graphs of 20 calls with and
   without a 256 MB memset before each (the benchmark's GPU-side sequence, no host gaps).
2. **Waves**: the layer at N = N0 - 128, N0 and N0 + 128 with N0's shipped config forced, GPU time from graph replay
   (L2 flushed), ROUNDS alternating rounds. With 256 x 128 tiles at N0 = 4096 the persistent grid runs 496 / 512 /
   528 tiles on 132 SMs: at most four tiles a program in all three. A layer bound by its waves takes the same time at
   all three N; one bound by throughput (power) takes time in proportion to N.

    PYTHONPATH=. python scripts/probe_power_waves.py [FAMILY] [M] [K] [N0] [ROUNDS] [SECONDS]
"""
import importlib
import statistics
import subprocess
import sys
import time

import torch
import triton.testing

from quantkit.kernels import tuning


def sample_while(fn, seconds):
    """Loop ``fn`` for ``seconds`` while nvidia-smi samples; returns (median MHz, median W, samples, calls)."""
    proc = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                             "-lms", "20"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)  # let the sampler start
    t_start = time.time()
    calls = 0
    while time.time() - t_start < seconds:
        fn()
        calls += 1
    torch.cuda.synchronize()
    proc.terminate()
    out, _ = proc.communicate()
    rows = []
    for line in out.strip().splitlines()[15:]:  # the first ~0.3 s came before the loop
        try:
            mhz, watts = (float(v) for v in line.split(","))
        except ValueError:
            continue
        rows.append((mhz, watts))
    if not rows:
        return float("nan"), float("nan"), 0, calls
    return (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows), len(rows), calls)


def main():
    args = sys.argv[1:]
    family = args[0] if args else "int8_dynamic"
    m = int(args[1]) if len(args) > 1 else 4096
    k = int(args[2]) if len(args) > 2 else 4096
    n0 = int(args[3]) if len(args) > 3 else 4096
    rounds = int(args[4]) if len(args) > 4 else 5
    seconds = float(args[5]) if len(args) > 5 else 3.0
    mod = importlib.import_module(f"quantkit.kernels.{family}")
    print(torch.cuda.get_device_name(), torch.__version__, f"{family} M={m} K={k} N0={n0}", flush=True)
    torch.manual_seed(0)
    config = tuning.get_config(family, m, n0, k, module=mod)
    print("config", config, flush=True)

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(n0, k, device="cuda") * 0.02).to(torch.bfloat16)
    inputs = mod.make_bench_inputs(n0, k, torch.bfloat16)
    layer = lambda: mod.linear(x, *inputs, config=config)  # noqa: E731
    bf16 = lambda: torch.nn.functional.linear(x, w)  # noqa: E731
    for fn in (layer, bf16):
        fn()
    torch.cuda.synchronize()

    def graph_of(fn, flush):
        """A CUDA graph of 20 calls of ``fn``, each after a 256 MB memset when ``flush`` (do_bench's L2 flush):
        the benchmark's GPU-side sequence without the host's gaps between calls."""
        cache = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(20):
                if flush:
                    cache.zero_()
                fn()
        graph.cache = cache  # keep the buffer alive with the graph

        def replay():
            graph.replay()
            torch.cuda.synchronize()  # one replay (~20 calls) queued at a time: the sampling window stays the run's

        return replay

    print("\n1. SM clock and power (median of 20 ms samples)", flush=True)
    print(f"{'workload':44s} {'MHz':>6s} {'W':>6s} {'samples':>8s} {'median us':>10s}", flush=True)
    for label, fn in (("idle", lambda: time.sleep(0.01)),
                      ("bf16 F.linear, do_bench (flush)", None),
                      (f"{family} layer, do_bench (flush)", None),
                      (f"{family} layer, back to back", layer),
                      ("bf16 F.linear, back to back", bf16),
                      ("bf16 F.linear, graph of flush + call", graph_of(bf16, True)),
                      (f"{family} layer, graph of flush + call", graph_of(layer, True)),
                      ("bf16 F.linear, graph of calls", graph_of(bf16, False)),
                      (f"{family} layer, graph of calls", graph_of(layer, False))):
        if fn is None:
            target = bf16 if label.startswith("bf16") else layer
            times = []

            def fn(target=target, times=times):
                times.append(triton.testing.do_bench(target, warmup=5, rep=50, return_mode="median") * 1e3)
        else:
            times = []
        mhz, watts, n_samples, _ = sample_while(fn, seconds)
        med = f"{statistics.median(times):10.1f}" if times else f"{'':10s}"
        print(f"{label:44s} {mhz:6.0f} {watts:6.0f} {n_samples:8d} {med}", flush=True)

    print(f"\n2. Waves: GPU µs (graph replay, L2 flushed), median of {rounds} alternating rounds, config forced",
          flush=True)
    runs = []
    for n in (n0 - 128, n0, n0 + 128):
        buf = mod.make_bench_inputs(n, k, torch.bfloat16)
        runs.append((n, lambda buf=buf: mod.linear(x, *buf, config=config)))
    times = {n: [] for n, _ in runs}
    for r in range(rounds):
        for n, fn in (runs if r % 2 == 0 else runs[::-1]):
            times[n].append(tuning.gpu_time_ms(fn) * 1e3)
    base = statistics.median(times[n0])
    for n, _ in runs:
        t = statistics.median(times[n])
        print(f"N = {n:6d}: {t:8.1f} us ({100 * (t / base - 1):+5.1f} % vs N0; N / N0 - 1 = "
              f"{100 * (n / n0 - 1):+5.1f} %)  rounds {' '.join(f'{v:.1f}' for v in times[n])}", flush=True)


if __name__ == "__main__":
    main()
