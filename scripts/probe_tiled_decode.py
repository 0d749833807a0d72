"""Timing probe: the decode kernels (`wo_decode_sm90`, `aq_decode_sm90`) reading the weight in its row-major
layout against a tiled one ([N / 16, K / DK, 16 rows, DK-chunk], so that a warp's 16-byte loads cover 512
contiguous bytes instead of 64 bytes of eight rows). Same bytes, same arithmetic: the outputs must be
bit-identical. GPU time as the sweep measures it (CUDA-graph replay, L2 flushed).

    PYTHONPATH=. python scripts/probe_tiled_decode.py           # each config both ways, four families
    PYTHONPATH=. python scripts/probe_tiled_decode.py grid      # int4: probe_config_grid's 40 configs, tiled
    PYTHONPATH=. python scripts/probe_tiled_decode.py diag      # M = 1: DIAG configs (row-major weight)
    PYTHONPATH=. python scripts/probe_tiled_decode.py diagm     # M = 1-4: the shipped config, plain and DIAG
"""
import sys

import torch

from quantkit.kernels import fp8_block as F
from quantkit.kernels import int4_weight_only as Q
from quantkit.kernels import int8_dynamic as I
from quantkit.kernels import int8_weight_only as W
from quantkit.kernels import tuning
from quantkit.kernels.wo_decode_sm90 import tile_weight


def configs(fam):
    if fam == "int4":
        return [Q._decode(mt, wk, sub=sub, xpf=xpf) for mt, wk, sub, xpf in
                [(1, 4, 1, True), (1, 8, 1, True), (1, 8, 2, False), (2, 4, 1, True), (4, 4, 1, False),
                 (2, 8, 1, True), (1, 2, 1, True), (2, 2, 1, True)]]
    if fam == "int8w":
        return [W._decode_config(mt, wk, sub=sub, xpf=xpf) for mt, wk, sub, xpf in
                [(1, 4, 1, True), (2, 4, 1, True), (1, 8, 1, True), (1, 8, 2, False), (1, 2, 1, True),
                 (2, 2, 1, True)]]
    if fam == "fp8":
        return [F._decode(mt, wk, wm=wm, dk=128) for mt, wk, wm in [(1, 4, 1), (2, 2, 1), (2, 2, 2), (1, 2, 1),
                                                                   (1, 8, 1)]]
    return [I._decode(mt, wk, wm=wm, dk=128) for mt, wk, wm in [(1, 4, 1), (2, 2, 1), (1, 2, 1), (1, 8, 1)]]


def grid():
    """int4 on the two 14336 shapes at M = 1 and 16: the shipped config (row-major) against the best tiled
    configs of probe_config_grid's int4 grid."""
    sys.path.insert(0, "scripts")
    from probe_config_grid import int4_grid

    torch.manual_seed(0)
    for n, k in ((14336, 4096), (4096, 14336)):
        packed, scale, zero, bias, g = Q.make_bench_inputs(n, k)
        tiled = tile_weight(packed, 64)
        for m in (1, 16):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            t_ship = tuning.gpu_time_ms(lambda: Q.linear(x, packed, scale, zero, bias, g)) * 1e3
            y_ship = Q.linear(x, packed, scale, zero, bias, g)
            rows = []
            for cfg in int4_grid():
                if cfg.get("DIAG"):  # (DIAG programs read 512 contiguous bytes row-major; not tiled)
                    continue
                tcfg = dict(cfg, TILED=True)
                y = Q.linear(x, tiled, scale, zero, bias, g, config=tcfg)
                d = (y.float() - y_ship.float()).abs().max().item()
                rows.append((tuning.gpu_time_ms(lambda: Q.linear(x, tiled, scale, zero, bias, g, config=tcfg)) * 1e3,
                             d, cfg))
            print(f"int4 {n}x{k} M={m}: shipped (row-major) {t_ship:.2f} us", flush=True)
            for t, d, cfg in sorted(rows, key=lambda r: r[0])[:6]:
                print(f"  tiled {t:6.2f} us  max|d| vs shipped {d:.3g}  {cfg}", flush=True)


def diag():
    """M = 1, int4 and int8 weight-only: the shipped config against DIAG configs on the row-major weight
    (max |d| against the shipped output: another float32 summation order)."""
    torch.manual_seed(0)
    shapes = [tuple(int(v) for v in a.split("x")) for a in sys.argv[2:]] or [(14336, 4096), (4096, 14336),
                                                                              (4096, 4096)]
    for fam, mod in (("int4", Q), ("int8w", W)):
        make = Q._decode if mod is Q else W._decode_config
        cfgs = [make(mt, wk, wm=wm, sub=sub, xpf=xpf, diag=True)
                for mt in (1, 2, 4) for wk in (1, 2, 4, 8) for wm in (1, 2) for sub in (1, 2) for xpf in (True, False)
                if wk * wm <= 8 and mt * wm <= 4 and sub * mt <= 4 and (xpf or mt == 1) and (wm == 1 or sub == 1)]
        for n, k in shapes:
            inputs = mod.make_bench_inputs(n, k, torch.bfloat16)
            x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
            y_ship = mod.linear(x, *inputs)
            t_ship = tuning.gpu_time_ms(lambda: mod.linear(x, *inputs)) * 1e3
            rows = []
            for cfg in cfgs:
                try:
                    y = mod.linear(x, *inputs, config=cfg)
                    d = (y.float() - y_ship.float()).abs().max().item() / y_ship.float().abs().max().item()
                    rows.append((tuning.gpu_time_ms(lambda: mod.linear(x, *inputs, config=cfg)) * 1e3, d, cfg))
                except Exception as exc:  # noqa: BLE001
                    print(f"  failed {type(exc).__name__}: {str(exc)[:200]} {cfg}", flush=True)
            print(f"{fam} {n}x{k} M=1: shipped {t_ship:.2f} us; {len(rows)} DIAG configs", flush=True)
            for t, d, cfg in sorted(rows, key=lambda r: r[0])[:8]:
                print(f"  diag {t:6.2f} us  max|d|/max|y| vs shipped {d:.2g}  {cfg}", flush=True)


def diag_small_m():
    """M = 1-4 on the Llama shapes, int4 and int8 weight-only: what the layer runs now (config=None), and
    decode configs plain against DIAG (4 chunks a slot at M = 2, 2 at M = 3-4); max |d| / max |y| against
    the plain config's output."""
    torch.manual_seed(0)
    for fam, mod in (("int4", Q), ("int8w", W)):
        make = Q._decode if mod is Q else W._decode_config
        cfgs = ([make(1, 1, wm=2), make(1, 1), make(1, 4), make(2, 4), make(4, 4, xpf=False), make(2, 8), make(1, 2)]
                if mod is Q else [make(1, 1, xpf=False), make(1, 2, xpf=False), make(2, 4), make(1, 4), make(2, 2)])
        for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
            inputs = mod.make_bench_inputs(n, k, torch.bfloat16)
            for m in (1, 2, 3, 4):
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                t_now = tuning.gpu_time_ms(lambda: mod.linear(x, *inputs)) * 1e3
                line = [f"{fam} {n}x{k} M={m}: now {t_now:.2f}"]
                for cfg in cfgs:
                    dcfg = dict(cfg, DIAG=True)
                    y0 = mod.linear(x, *inputs, config=cfg)
                    y1 = mod.linear(x, *inputs, config=dcfg)
                    d = (y1.float() - y0.float()).abs().max().item() / y0.float().abs().max().item()
                    t0 = tuning.gpu_time_ms(lambda: mod.linear(x, *inputs, config=cfg)) * 1e3
                    t1 = tuning.gpu_time_ms(lambda: mod.linear(x, *inputs, config=dcfg)) * 1e3
                    line.append(f"{cfg['MT']}/{cfg['WK']}/{cfg['WM']}{'' if cfg.get('XPF', True) else 'x'} "
                                f"{t0:.2f}->{t1:.2f} (d {d:.0e})")
                print(" | ".join(line), flush=True)


def main():
    if sys.argv[1:] == ["diagm"]:
        return diag_small_m()
    if sys.argv[1:] == ["grid"]:
        return grid()
    if sys.argv[1:2] == ["diag"]:
        return diag()
    torch.manual_seed(0)
    for fam, mod in (("int4", Q), ("int8w", W), ("fp8", F), ("int8", I)):
        for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
            inputs = list(mod.make_bench_inputs(n, k, torch.bfloat16) if mod is W else mod.make_bench_inputs(n, k))
            w_rm = inputs[0]
            wb = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
            for m in ((1, 16) if fam in ("int4", "int8w") else (16,)):
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                t_bf16 = tuning.gpu_time_ms(lambda: torch.nn.functional.linear(x, wb)) * 1e3
                print(f"{fam} {n}x{k} M={m}: bf16 {t_bf16:.2f} us", flush=True)
                for cfg in configs(fam):
                    chunk = cfg["DK"] // 2 if fam == "int4" else cfg["DK"]
                    try:
                        inputs[0] = w_rm
                        y0 = mod.linear(x, *inputs, config=cfg)
                        t0 = tuning.gpu_time_ms(lambda: mod.linear(x, *inputs, config=cfg)) * 1e3
                        inputs[0] = tile_weight(w_rm.view(torch.uint8), chunk).view(w_rm.dtype)
                        tcfg = dict(cfg, TILED=True)
                        y1 = mod.linear(x, *inputs, config=tcfg)
                        t1 = tuning.gpu_time_ms(lambda: mod.linear(x, *inputs, config=tcfg)) * 1e3
                        inputs[0] = w_rm
                        t2 = tuning.gpu_time_ms(lambda: mod.linear(x, *inputs, config=cfg)) * 1e3
                        same = torch.equal(y0, y1)
                        gain = (min(t0, t2) / t1 - 1) * 100
                        print(f"  row-major {t0:6.2f} / {t2:6.2f}  tiled {t1:6.2f} us ({gain:+.1f} %)"
                              f"  bit-identical {same}  {cfg}", flush=True)
                    except Exception as exc:  # noqa: BLE001
                        inputs[0] = w_rm
                        print(f"  failed {type(exc).__name__}: {str(exc)[:200]} {cfg}", flush=True)


if __name__ == "__main__":
    main()
