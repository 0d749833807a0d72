"""More cp.async / TMA stages for the small- and mid-M kernels: each cell's shipped config against the
same kernel with other stage counts (and a few neighbouring tiles), GPU time as the sweep measures it
(CUDA-graph replay, L2 flushed). Outputs of every variant are checked against the shipped config's
(bit-identical where only the pipelining differs).

    PYTHONPATH=. python scripts/probe_stage_counts.py
"""
import importlib

import torch

from quantkit.kernels import tuning

F8 = importlib.import_module("quantkit.kernels.fp8_block")
W8 = importlib.import_module("quantkit.kernels.int8_weight_only")
A8 = importlib.import_module("quantkit.kernels.int8_dynamic")
W4 = importlib.import_module("quantkit.kernels.int4_weight_only")
SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]
FAMILIES = {F8: "fp8_block", W8: "int8_weight_only", A8: "int8_dynamic", W4: "int4_weight_only"}


def variants(mod, m, n, k):
    base = tuning.get_config(FAMILIES[mod], m, n, k, module=mod)
    out = [base]
    kind = base.get("kernel")
    if "num_stages" in base:
        for s in (2, 3, 4, 5, 6):
            if s != base["num_stages"]:
                out.append(dict(base, num_stages=s))
    if mod is W8 and kind == "gemv":
        out += [W8._gemv_config(8, 1024, 4, 4), W8._gemv_config(4, 1024, 4, 4), W8._gemv_config(8, 2048, 4, 2),
                W8._gemv_config(16, 256, 4, 5)]
    if mod is W8 and kind == "stream":
        out += [W8._stream_config(16, 1024, 4, 4), W8._stream_config(16, 256, 4, 6), W8._stream_config(16, 512, 8, 4)]
    if mod is W4 and kind == "gemv":
        out += [W4._gemv(8, 2048, 4, 2), W4._gemv(4, 1024, 4, 3), W4._gemv(16, 512, 4, 4)]
    return out


def main():
    torch.manual_seed(0)
    for mod, ms in ((F8, (1, 16, 128)), (A8, (128,)), (W8, (1, 16, 128)), (W4, (1, 16, 128))):
        for n, k in SHAPES:
            buffers = mod.make_bench_inputs(n, k, torch.bfloat16)
            for m in ms:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                rows = []
                ref = None
                for cfg in variants(mod, m, n, k):
                    try:
                        y = mod.linear(x, *buffers, config=cfg)
                        if ref is None:
                            ref = y
                        same = torch.equal(y, ref)
                        close = same or ((y.float() - ref.float()).norm() / ref.float().norm()).item() < 1e-2
                        t = tuning.gpu_time_ms(lambda: mod.linear(x, *buffers, config=cfg)) * 1e3
                        rows.append((t, cfg, "" if same else (" (differs, close)" if close else " (WRONG)")))
                    except Exception as e:  # noqa: BLE001
                        rows.append((float("inf"), cfg, f" failed {type(e).__name__}: {str(e)[:60]}"))
                base_t = rows[0][0]
                best = min(rows, key=lambda r: r[0])
                print(f"{FAMILIES[mod]} M={m} {n}x{k}: shipped {base_t:.1f} us; best {best[0]:.1f} us "
                      f"({100 * (best[0] / base_t - 1):+.1f} %) {best[1]}{best[2]}", flush=True)
                for t, cfg, note in sorted(rows, key=lambda r: r[0]):
                    print(f"    {t:8.1f}  {cfg}{note}", flush=True)


if __name__ == "__main__":
    main()
