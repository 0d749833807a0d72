"""The weight-only decode kernel's weight load in other PTX forms: one process per variant (the load is a
module constant that the kernel's compile reads), each timing the shipped configs of the decode cells (GPU
time as the sweep measures it: CUDA-graph replay, L2 flushed) and printing one line per cell; outputs are
compared with the shipped load's (max |d|, expected 0).

    PYTHONPATH=. python notes/results/round25/probe_decode_load_variants.py VARIANT     (one process; VARIANT below)
    PYTHONPATH=. python notes/results/round25/probe_decode_load_variants.py --all ROUNDS  (every variant, alternating)
"""
import json
import os
import statistics
import subprocess
import sys

VARIANTS = {
    "shipped": None,
    "nc_evict_first": "ld.global.nc.L1::evict_first.L2::128B",
    "nc_no_allocate": "ld.global.nc.L1::no_allocate.L2::128B",
    "no_allocate": "ld.global.L1::no_allocate.L2::128B",
    "nc_evict_first_256": "ld.global.nc.L1::evict_first.L2::256B",
}
CELLS = [("int4_weight_only", 1, 14336, 4096), ("int4_weight_only", 16, 14336, 4096),
         ("int4_weight_only", 1, 4096, 14336), ("int4_weight_only", 16, 4096, 14336),
         ("int4_weight_only", 16, 4096, 4096), ("int8_weight_only", 16, 14336, 4096),
         ("int8_weight_only", 1, 14336, 4096)]


def _patch(op: str) -> None:
    from triton.experimental.gluon import language as gl

    from quantkit.kernels import wo_decode_sm90 as d

    def asm(vec, masked):
        outs = ", ".join(f"${i}" for i in range(vec))
        ld = f"{op}.v{vec}.b32 {{{outs}}}, [${vec}];"
        if not masked:
            return ld
        zeros = "".join(f"mov.b32 ${i}, 0;\n" for i in range(vec))
        return f"{{\n.reg .pred p;\nsetp.ne.b32 p, ${2 * vec}, 0;\n{zeros}@p {ld}\n}}"

    d._ASM_LD2 = gl.constexpr(asm(2, False))
    d._ASM_LD4 = gl.constexpr(asm(4, False))
    d._ASM_LD2_MASKED = gl.constexpr(asm(2, True))
    d._ASM_LD4_MASKED = gl.constexpr(asm(4, True))


def one(variant: str) -> None:
    if VARIANTS[variant]:
        _patch(VARIANTS[variant])
    import importlib

    import torch

    from quantkit.kernels import tuning

    torch.manual_seed(0)
    res = {}
    for family, m, n, k in CELLS:
        mod = importlib.import_module(f"quantkit.kernels.{family}")
        inputs = mod.make_bench_inputs(n, k, torch.bfloat16)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        cfg = tuning.get_config(family, m, n, k, module=mod)
        y = mod.linear(x, *inputs, config=cfg)
        t = tuning.gpu_time_ms(lambda: mod.linear(x, *inputs, config=cfg)) * 1e3
        res[f"{family} M={m} {n}x{k}"] = (t, float(y.float().abs().sum()), cfg.get("kernel"))
    print("RESULT " + json.dumps(res), flush=True)


def main():
    if sys.argv[1] != "--all":
        one(sys.argv[1])
        return
    rounds = int(sys.argv[2])
    times = {}
    sums = {}
    names = list(VARIANTS)
    for r in range(rounds):
        for v in (names if r % 2 == 0 else names[::-1]):
            env = dict(os.environ, TRITON_CACHE_DIR=os.environ.get("TRITON_CACHE_DIR", "/tmp/tc") + "_" + v)
            out = subprocess.run([sys.executable, __file__, v], env=env, capture_output=True, text=True)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if not line:
                print(f"{v}: failed\n{out.stderr[-2000:]}", flush=True)
                continue
            for cell, (t, s, kind) in json.loads(line[0][7:]).items():
                times.setdefault((cell, v), []).append(t)
                sums[(cell, v)] = (s, kind)
    import torch
    print(torch.cuda.get_device_name(), f"median of {rounds} alternating rounds, GPU us (graph replay, L2 flushed)")
    for cell in dict.fromkeys(c for c, _ in times):
        base = statistics.median(times[(cell, "shipped")]) if (cell, "shipped") in times else None
        parts = []
        for v in names:
            if (cell, v) not in times:
                continue
            t = statistics.median(times[(cell, v)])
            same = "=" if sums[(cell, v)][0] == sums[(cell, "shipped")][0] else "!="
            parts.append(f"{v} {t:.2f}" + (f" ({100 * (t / base - 1):+.1f}%)" if base else "") + f" {same}")
        print(f"{cell} [{sums[(cell, 'shipped')][1]}]: " + "; ".join(parts), flush=True)


if __name__ == "__main__":
    main()
