"""What the L2 flush leaves behind, and what it costs a layer that reads its weights once.

``triton.testing.do_bench`` (PERFORMANCE.md's timer) clears L2 by zeroing a 256 MB buffer before every
call. L2 is write-back, so the flush leaves L2 full of dirty lines, and a timed kernel that reads B bytes
evicts them: up to B bytes written back to DRAM inside its timing window, sharing the bandwidth its reads
need. This probe times the same work after three flushes:

- ``zero``: do_bench's own (``cache.zero_()``);
- ``read``: the same buffer read once after being zeroed (its lines clean when the timed call starts);
- ``none``: no flush (what is left hot in L2 hits).

on a plain read kernel of B bytes, bf16 ``F.linear`` and the int4 / int8 weight-only layers' shipped
kernels. With ``--policy P`` the weight-only decode kernel's loads carry an L2 eviction policy (``first``:
``createpolicy.fractional.L2::evict_first``), so its weight lines, not the flush's dirty ones, are the
ones replaced.

    PYTHONPATH=. python notes/results/round25/probe_l2_flush_state.py [--policy first] [--rounds R]
"""
import argparse
import statistics

import torch
import triton
import triton.language as tl


@triton.jit
def _read_kernel(p, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(p + offs, mask=offs < n, other=0)
    acc = tl.reduce(v, 0, _xor)
    tl.store(out + tl.program_id(0), acc, mask=acc == 0x7FFF1234)  # never true on random data


@triton.jit
def _xor(a, b):
    return a ^ b


def _patch_policy(policy: str) -> None:
    """Give the decode kernel's weight loads an L2 eviction policy (before anything compiles)."""
    from triton.experimental.gluon import language as gl

    from quantkit.kernels import wo_decode_sm90 as d

    def asm(vec, masked):
        outs = ", ".join(f"${i}" for i in range(vec))
        ld = (f"ld.global.L1::evict_first.L2::cache_hint.L2::128B.v{vec}.b32 {{{outs}}}, [${vec}], pol;")
        head = f".reg .b64 pol;\ncreatepolicy.fractional.L2::evict_{policy}.b64 pol, 1.0;\n"
        if not masked:
            return "{\n" + head + ld + "\n}"
        zeros = "".join(f"mov.b32 ${i}, 0;\n" for i in range(vec))
        return "{\n" + head + f".reg .pred p;\nsetp.ne.b32 p, ${2 * vec}, 0;\n{zeros}@p {ld}\n}}"

    d._ASM_LD2 = gl.constexpr(asm(2, False))
    d._ASM_LD4 = gl.constexpr(asm(4, False))
    d._ASM_LD2_MASKED = gl.constexpr(asm(2, True))
    d._ASM_LD4_MASKED = gl.constexpr(asm(4, True))


class Flush:
    def __init__(self):
        self.cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
        self.sink = torch.empty(self.cache.numel() // 16384, dtype=torch.int32, device="cuda")

    def zero(self):
        self.cache.zero_()

    def read(self):
        self.cache.zero_()
        n = self.cache.numel()  # the zeroed lines read back: L2 holds clean lines of it
        _read_kernel[(n // 16384,)](self.cache, self.sink, n, BLOCK=16384, num_warps=8)

    def none(self):
        pass


def time_us(fn, flush, reps=200, warmup=20):
    for _ in range(warmup):
        flush()
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="comma list of row prefixes to run")
    args = ap.parse_args()
    if args.policy:
        _patch_policy(args.policy)
    from quantkit.kernels import int4_weight_only, int8_weight_only, tuning

    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__,
          f"policy={args.policy or 'shipped'}", flush=True)
    torch.manual_seed(0)
    fl = Flush()
    rows = []
    out = torch.empty(1 << 20, dtype=torch.int32, device="cuda")
    for mb in (1, 8.8, 30.8, 64, 117.4):
        n = int(mb * 1e6) // 4
        buf = torch.randint(-2**31, 2**31 - 1, (n,), dtype=torch.int32, device="cuda")
        block = 16384
        rows.append((f"read {mb} MB", lambda buf=buf, n=n: _read_kernel[(triton.cdiv(n, block),)](
            buf, out, n, BLOCK=block, num_warps=8), mb * 1e6))
    for n_, k_ in ((4096, 4096), (14336, 4096), (4096, 14336)):
        w = (torch.randn(n_, k_, device="cuda") * 0.02).to(torch.bfloat16)
        for m in (1, 16):
            x = torch.randn(m, k_, device="cuda", dtype=torch.bfloat16)
            rows.append((f"bf16 {n_}x{k_} M={m}", lambda x=x, w=w: torch.nn.functional.linear(x, w),
                         2 * n_ * k_))
            for name, mod in (("int4", int4_weight_only), ("int8wo", int8_weight_only)):
                inputs = mod.make_bench_inputs(n_, k_, torch.bfloat16)
                cfg = tuning.get_config(mod.FAMILY, m, n_, k_, module=mod)
                nbytes = sum(t.numel() * t.element_size() for t in inputs if torch.is_tensor(t))
                rows.append((f"{name} {n_}x{k_} M={m}",
                             lambda x=x, inputs=inputs, cfg=cfg, mod=mod: mod.linear(x, *inputs, config=cfg), nbytes))
    if args.only:
        keep = tuple(args.only.split(","))
        rows = [r for r in rows if r[0].startswith(keep)]
    modes = ("zero", "read", "none")
    res = {(label, mode): [] for label, _, _ in rows for mode in modes}
    for r in range(args.rounds):
        for label, fn, _ in (rows if r % 2 == 0 else rows[::-1]):
            for mode in (modes if r % 2 == 0 else modes[::-1]):
                res[(label, mode)].append(time_us(fn, getattr(fl, mode)))
    from triton import testing as tt
    print(f"{'row':32s} {'bytes MB':>9s} {'zero':>8s} {'read':>8s} {'none':>8s} {'do_bench':>9s}  "
          f"GB/s zero / read", flush=True)
    for label, fn, nbytes in rows:
        med = {mode: statistics.median(res[(label, mode)]) for mode in modes}
        db = tt.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3
        print(f"{label:32s} {nbytes / 1e6:9.1f} {med['zero']:8.1f} {med['read']:8.1f} {med['none']:8.1f} "
              f"{db:9.1f}  {nbytes / med['zero'] / 1e3:6.0f} / {nbytes / med['read'] / 1e3:6.0f}", flush=True)


if __name__ == "__main__":
    main()
