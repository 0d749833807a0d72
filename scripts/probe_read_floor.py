"""The floor of a weight-streaming layer under PERFORMANCE.md's timer: how fast any kernel can read B bytes once
when ``triton.testing.do_bench`` times it (L2 cleared before each call by zeroing a 256 MB buffer, which leaves
L2 full of dirty lines that the timed reads must evict, so their write-back shares DRAM with the reads).

For each byte count a layer streams (the packed weights, scales and zero-points of int4 / 8-bit weights at the
benchmark shapes, and bf16's weights) a grid of plain read kernels (one block a program, or persistent with
several loads in flight) is timed with do_bench, eager as the per-layer benchmark times, in alternating rounds;
the fastest config's median is the floor. Beside it: bf16 ``F.linear`` and the shipped layer kernels of the same
cells, so each cell's best possible ratio (bf16 / floor) can be set against its target.

    PYTHONPATH=. python scripts/probe_read_floor.py [--rounds R]
"""
import argparse
import statistics

import torch
import triton
import triton.language as tl
from triton import testing as tt


@triton.jit
def _xor(a, b):
    return a ^ b


@triton.jit
def _read_block(p, out, n, BLOCK: tl.constexpr, EVICT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(p + offs, mask=offs < n, other=0, eviction_policy=EVICT)
    acc = tl.reduce(v, 0, _xor)
    tl.store(out + tl.program_id(0), acc, mask=acc == 0x7FFF1234)  # never true on random data


@triton.jit
def _read_persistent(p, out, n, BLOCK: tl.constexpr, UNROLL: tl.constexpr, EVICT: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], tl.int32)
    for start in range(pid * BLOCK * UNROLL, n, tl.num_programs(0) * BLOCK * UNROLL):
        for u in tl.static_range(UNROLL):
            offs = start + u * BLOCK + tl.arange(0, BLOCK)
            acc ^= tl.load(p + offs, mask=offs < n, other=0, eviction_policy=EVICT)
    r = tl.reduce(acc, 0, _xor)
    tl.store(out + pid, r, mask=r == 0x7FFF1234)


def read_configs(sms: int):
    for block in (4096, 8192, 16384, 32768):
        for warps in (4, 8):
            for evict in ("", "evict_first"):
                yield ("block", block, warps, evict, 0, 0)
    for progs in (1, 2, 4):
        for block, unroll in ((2048, 4), (4096, 2), (4096, 4), (8192, 2)):
            for warps in (8,):
                yield ("persistent", block, warps, "evict_first", unroll, progs * sms)


def launch(cfg, buf, out):
    kind, block, warps, evict, unroll, progs = cfg
    n = buf.numel()
    if kind == "block":
        return lambda: _read_block[(triton.cdiv(n, block),)](buf, out, n, BLOCK=block, EVICT=evict, num_warps=warps)
    return lambda: _read_persistent[(progs,)](buf, out, n, BLOCK=block, UNROLL=unroll, EVICT=evict, num_warps=warps)


def bench(fn):
    return tt.do_bench(fn, warmup=25, rep=60, return_mode="median") * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from quantkit.kernels import fp8_block, int4_weight_only, int8_weight_only, tuning

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    torch.manual_seed(0)
    out = torch.empty(1 << 22, dtype=torch.int32, device="cuda")
    cells = []  # (label, bytes, layer fn or None, bf16 fn)
    for n_, k_ in ((4096, 4096), (14336, 4096), (4096, 14336)):
        w = (torch.randn(n_, k_, device="cuda") * 0.02).to(torch.bfloat16)
        for m in (1, 16):
            x = torch.randn(m, k_, device="cuda", dtype=torch.bfloat16)
            bf16 = (lambda x=x, w=w: torch.nn.functional.linear(x, w))
            cells.append((f"bf16 {n_}x{k_} M={m}", 2 * n_ * k_, bf16, bf16))
            for name, mod in (("int4", int4_weight_only), ("int8wo", int8_weight_only), ("fp8", fp8_block)):
                inputs = mod.make_bench_inputs(n_, k_, torch.bfloat16)
                cfg = tuning.get_config(mod.__name__.rsplit(".", 1)[1], m, n_, k_, module=mod)
                nbytes = sum(t.numel() * t.element_size() for t in inputs if torch.is_tensor(t))
                cells.append((f"{name} {n_}x{k_} M={m}", nbytes,
                              lambda x=x, inputs=inputs, cfg=cfg, mod=mod: mod.linear(x, *inputs, config=cfg), bf16))
    sizes = sorted({nbytes for _, nbytes, _, _ in cells})
    bufs = {b: torch.randint(-2**31, 2**31 - 1, (b // 4,), dtype=torch.int32, device="cuda") for b in sizes}
    cfgs = list(read_configs(sms))
    runs = [(("read", b, c), launch(c, bufs[b], out)) for b in sizes for c in cfgs]
    runs += [(("cell", label), fn) for label, _, fn, _ in cells]
    times = {key: [] for key, _ in runs}
    for r in range(args.rounds):
        for key, fn in (runs if r % 2 == 0 else runs[::-1]):
            times[key].append(bench(fn))
    med = {key: statistics.median(v) for key, v in times.items()}
    floor = {}
    print(f"\nread floor (do_bench eager, median of {args.rounds} alternating rounds; best config of {len(cfgs)})")
    for b in sizes:
        ranked = sorted((med[("read", b, c)], c) for c in cfgs)
        floor[b] = ranked[0][0]
        top = "; ".join(f"{t:.2f} {c}" for t, c in ranked[:3])
        print(f"  {b / 1e6:7.2f} MB: {floor[b]:6.2f} us  ({b / floor[b] / 1e3:5.0f} GB/s)  top: {top}", flush=True)
    print(f"\n{'cell':28s} {'MB':>7s} {'bf16':>7s} {'layer':>7s} {'floor':>7s} {'ratio':>6s} {'max':>6s} "
          f"{'layer/floor':>11s}")
    for label, nbytes, _, _ in cells:
        bf16_label = "bf16 " + label.split(" ", 1)[1]
        tb, tl_, tf = med[("cell", bf16_label)], med[("cell", label)], floor[nbytes]
        print(f"{label:28s} {nbytes / 1e6:7.2f} {tb:7.2f} {tl_:7.2f} {tf:7.2f} {tb / tl_:6.2f} {tb / tf:6.2f} "
              f"{tl_ / tf:11.3f}", flush=True)


if __name__ == "__main__":
    main()
