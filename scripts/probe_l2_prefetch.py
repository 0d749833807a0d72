"""Software L2 prefetch of the weight stream at decode sizes: each cell's shipped config against the
same kernel asking L2 for the weight PF steps (trips) ahead of its register / cp.async buffers
(``PF`` in the GEMV and decode configs), plus, where a GEMV is shipped, the decode kernel with it.
GPU time as the sweep measures it (CUDA-graph replay, L2 flushed) and eager (the benchmark's
method). Outputs are checked bit-identical to the shipped config's where the kernel is the same.

    PYTHONPATH=. python scripts/probe_l2_prefetch.py [--quick]
"""
import importlib
import sys

import torch
import triton.testing

from quantkit.kernels import tuning

F8 = importlib.import_module("quantkit.kernels.fp8_block")
A8 = importlib.import_module("quantkit.kernels.int8_dynamic")
W8 = importlib.import_module("quantkit.kernels.int8_weight_only")
W4 = importlib.import_module("quantkit.kernels.int4_weight_only")
FAMILIES = {F8: "fp8_block", A8: "int8_dynamic", W8: "int8_weight_only", W4: "int4_weight_only"}
SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]


def variants(mod, m, n, k, pfs):
    base = tuning.get_config(FAMILIES[mod], m, n, k, module=mod)
    out = [base]
    if base.get("kernel") == "decode":
        out += [dict(base, PF=p) for p in pfs]
    return out


def eager_us(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3


def main():
    quick = "--quick" in sys.argv
    pfs = (1, 2) if quick else (1, 2, 4)
    torch.manual_seed(0)
    plan = [(W4, (1, 16)), (W8, (1, 16)), (F8, (16,)), (A8, (16,))]
    for mod, ms in plan:
        for n, k in SHAPES:
            buffers = mod.make_bench_inputs(n, k, torch.bfloat16)
            for m in ms:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                rows, ref = [], None
                for cfg in variants(mod, m, n, k, pfs):
                    try:
                        y = mod.linear(x, *buffers, config=cfg)
                        if ref is None:
                            ref = y
                        same = torch.equal(y, ref)
                        close = ((y.float() - ref.float()).norm() / ref.float().norm()).item() < 1e-2
                        g = tuning.gpu_time_ms(lambda: mod.linear(x, *buffers, config=cfg)) * 1e3
                        e = eager_us(lambda: mod.linear(x, *buffers, config=cfg))
                        rows.append((g, e, cfg, "" if same else (" (differs, close)" if close else " (WRONG)")))
                    except Exception as exc:  # noqa: BLE001
                        rows.append((float("inf"), float("inf"), cfg, f" failed {type(exc).__name__}: {str(exc)[:80]}"))
                g0, e0 = rows[0][0], rows[0][1]
                best = min(rows, key=lambda r: r[0])
                print(f"{FAMILIES[mod]} M={m} {n}x{k}: shipped {g0:.1f} us graph / {e0:.1f} eager; best graph "
                      f"{best[0]:.1f} ({100 * (best[0] / g0 - 1):+.1f} %) eager {best[1]:.1f} {best[2]}{best[3]}",
                      flush=True)
                for g, e, cfg, note in sorted(rows, key=lambda r: r[0]):
                    print(f"    {g:8.1f} {e:8.1f}  {cfg}{note}", flush=True)


if __name__ == "__main__":
    main()
