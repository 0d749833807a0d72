"""Wider config grids than the sweep's (at most eight configs a cell), GPU time as the sweep measures it
(CUDA-graph replay, L2 flushed), against bf16 ``F.linear`` in the same run; each output checked against
the shipped config's (max |d|). Families (first argument):

* ``fp8``: fp8-block at M <= 16 (``swap`` / ``stream`` with x quantized in every program, the Gluon decode
  kernel after one quantization launch); ``fp8m``: its kernels at M = 17-256; ``fp8g``: its Gluon GEMM
  with narrow tiles; ``fp8sw``: its swap kernel at M = 17-64;
* ``int8``: int8-dynamic at M <= 16 (``fused``, ``stream``, decode); ``int8g``: its M = 1 GEMVs;
  ``int8m`` / ``int8l``: its GEMMs at M = 17-256 / large M; ``int8ms``: its Gluon GEMM with split-K at
  M = 17-256; ``int8lt``: its warp-specialized GEMM with TMA
  stores at large M;
* ``int8w``: int8 weight-only's M <= 16 kernels (``stream``, decode); ``int8wg``: its M = 1 GEMVs (and
  decode configs, DIAG ones too); ``int8wm`` / ``int4m``: int8 / int4 weight-only at M = 17-256 (the
  Triton mma candidates and the Gluon GEMM's tiles, split-K by stream-K included);
* ``int4``: int4 weight-only's decode kernel (at M = 1 also DIAG programs); ``int4g``: its M = 1 GEMVs;
  ``int4s``: its Triton small-M kernel; ``int4l``: its Gluon GEMM at large M;
* ``int4d`` / ``int8wd``: the weight-only decode kernels' DIAG programs with DG = 2, 4, 8 chunks a slot
  (M <= 4); ``int4si``: int4's decode kernel with SCALE_IN and register caps (M = 16); ``int4dk64``: int4's
  decode kernel on 64-deep chunks;

    PYTHONPATH=. python scripts/probe_config_grid.py FAMILY [M] [NxK ...]
"""
import itertools
import sys

import torch

from quantkit.kernels import fp8_block as F
from quantkit.kernels import int4_weight_only as Q
from quantkit.kernels import int8_dynamic as I
from quantkit.kernels import int8_weight_only as W
from quantkit.kernels import tuning
from quantkit.kernels.wo_gemm_sm90 import _SMEM_BYTES


def fp8_grid():
    out = []
    for bw, groups, warps, stages in itertools.product((64, 128), (1, 2, 4), (4, 8), (3, 4, 5)):
        out.append(F._swap(bw, 16, groups, warps, stages, True))
    for bw, bx, warps, stages in itertools.product((16, 32, 64), (16,), (4, 8), (3, 4)):
        out.append(F._stream(bw, bx, warps, stages))
    for mt, wk, wm, dk, sub, bm in itertools.product((1, 2), (2, 4, 8), (1, 2), (64, 128), (1,), (8, 16)):
        if wk * wm <= 16 and not (mt == 2 and wm == 4):
            out.append(F._decode(mt, wk, wm=wm, dk=dk, sub=sub, bm=bm))
    return out


def fp8_gluon_grid():
    """The Gluon GEMM (TMA ring, persistent) with narrow tiles, launched while the quantization runs."""
    return [F._gluon(128, bn, 8, stages, pdl=True) for bn in (32, 64) for stages in (6, 8, 10)]


def int8_grid():
    out = []
    for bn, bk, warps, stages in itertools.product((32, 64, 128), (256, 512), (4, 8), (3, 4)):
        out.append(I._fused(bn, bk, warps, stages))
    for bn, bk, warps, stages, bm in itertools.product((16, 32), (128, 256), (4, 8), (3, 4), (16,)):
        out.append(I._stream(bn, bk, warps, stages, bm=bm))
    for mt, wk, wm, dk, sub, bm in itertools.product((1, 2), (2, 4, 8), (1, 2), (64, 128), (1,), (8, 16)):
        if wk * wm <= 16 and not (mt == 2 and wm == 4):
            out.append(I._decode(mt, wk, wm=wm, dk=dk, sub=sub, bm=bm))
    return out


def int8_large_grid():
    out = []
    for bm, bn, bk, stages in [(128, 256, 128, 3), (128, 256, 128, 4), (256, 128, 128, 3), (256, 128, 128, 4),
                               (128, 256, 64, 6), (256, 128, 64, 6), (128, 256, 64, 8)]:
        for pdl in (False, True):
            out.append(I._two_pass(bm, bn, bk, 8, stages, mode="gluon", pdl=pdl))
    for bm, bn, bk, stages in [(128, 128, 128, 5), (128, 128, 128, 6), (128, 256, 128, 3), (128, 256, 128, 4),
                               (256, 128, 128, 3), (256, 128, 128, 4), (128, 256, 64, 6), (256, 128, 64, 6),
                               (128, 256, 64, 8), (256, 128, 64, 8)]:
        for group_m in (8, 16):
            out.append(I._two_pass(bm, bn, bk, 8, stages, mode="gluon_ws", group_m=group_m))
        out.append(I._two_pass(bm, bn, bk, 8, stages, mode="gluon_ws", pdl=True))
    return out


def int8_large_tma_grid():
    """The warp-specialized GEMM with its output by TMA stores (EPI "tma")."""
    out = []
    for bm, bn, bk, stages in [(128, 128, 128, 4), (128, 128, 128, 5), (128, 128, 128, 6), (128, 256, 128, 3),
                               (256, 128, 128, 3), (128, 256, 64, 6), (256, 128, 64, 6), (128, 128, 64, 8),
                               (128, 128, 64, 10)]:
        for group_m in (8, 16):
            out.append(I._two_pass(bm, bn, bk, 8, stages, mode="gluon_ws", group_m=group_m, epi="tma"))
    return out


def int8_mid_split_grid():
    """int8-dynamic at M = 17-256: the shipped candidates and the Gluon GEMM with split-K (int32 partials)."""
    out = list(I.candidate_configs(128, 4096, 4096))
    for (bm, bn, warps), split, stages in itertools.product([(64, 64, 4), (64, 128, 4), (128, 64, 8), (128, 128, 8),
                                                             (128, 256, 8)], (1, 2, 4, 8), (4, 6)):
        out.append(I._two_pass(bm, bn, 128, warps, stages, mode="gluon", pdl=True, split_k=split))
    return out


def fp8_mid_grid():
    out = []
    for (bw, bx), groups, warps, split in itertools.product([(64, 64), (128, 64), (64, 128), (128, 128), (32, 128)],
                                                            (1, 2), (4, 8), (1, 2)):
        out.append(F._swap(bw, bx, groups, warps, 3, False, split_k=split, pdl=True))
    for stages, split, pdl in itertools.product((4, 5), (1, 2, 4), (False, True)):
        out.append(F._swap(64, 64, 2, 4, stages, False, split_k=split, pdl=pdl))
    out += [F._tiled(64, 128, 4, 4, False), F._tiled(128, 128, 8, 4, True), F._gluon(128, 128, 8, 4),
            F._gluon(128, 64, 8, 4), F._gluon(128, 64, 8, 6, pdl=True)]
    return out


def fp8_swap_grid():
    """fp8-block's swap kernel at M = 17-64 (round 32): 64 weight rows, 16-64 x rows a tile, one or two K blocks a
    step, 3-5 stages, split-K 1 / 2 / 4, launched with PDL."""
    out = []
    for bx, groups, stages, split in itertools.product((32, 64), (1, 2), (3, 4, 5), (1, 2, 4)):
        out.append(F._swap(64, bx, groups, 4, stages, False, split_k=split, pdl=True))
    out += [F._swap(64, 16, 2, 4, 4, False, split_k=split, pdl=True) for split in (1, 4)]
    return out


def int8_mid_grid():
    out = []
    for (bm, bn), split, pdl, stages in itertools.product([(64, 64), (64, 128), (128, 64), (128, 128)], (1, 2, 4),
                                                          (False, True), (3, 4)):
        out.append(I._two_pass(bm, bn, 128, 4 if bm == 64 else 8, stages, pdl=pdl, split_k=split))
    for mode, (bm, bn), pdl in itertools.product(("tma", "gluon"), [(64, 128), (128, 64), (128, 128)], (False, True)):
        out.append(I._two_pass(bm, bn, 128, 4 if bm == 64 else 8, 4, mode=mode, pdl=pdl))
    out += [I._two_pass(128, 128, 128, 8, s, mode="gluon_ws", pdl=p) for s in (4, 5) for p in (False, True)]
    return out


def int4_large_grid():
    out = []
    for (bm, bn), stages, group_m, persistent in itertools.product([(256, 128), (128, 256), (128, 128)], (4, 5, 6),
                                                                    (8, 16), (False, True)):
        out.append(Q._tma_wgmma(bm, bn, 64, 8, stages, group_m, persistent))
    out += [Q._tma_wgmma(stages=s, stream_k=True) for s in (4, 5, 6)]
    return out


def _wo_mid_tiles():
    """(BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, stream-K) of the register-operand Gluon GEMM at M = 17-256:
    x tiles of 64 or 128 rows, 64 or 128 weight rows, and with stream-K every tile cut along K where
    the tiles are fewer than half the SMs (split-K)."""
    out = []
    for bm, (bn, warps), bk, stages, sk in itertools.product((64, 128), ((64, 4), (128, 8)), (64, 128), (3, 4, 6),
                                                           (False, True)):
        if stages * (bm * bk * 2 + bn * bk) <= _SMEM_BYTES:  # (the int8 weight tile: int4's is half)
            out.append((bm, bn, bk, warps, stages, sk))
    return out


def int8_wo_mid_grid():
    """int8 weight-only at M = 17-256: the shipped candidates (Triton mma) and the Gluon GEMM's tiles."""
    return W.candidate_configs(128, 4096, 4096) + [W._tma_wgmma_config(bm, bn, bk, w, st, stream_k=sk)
                                                   for bm, bn, bk, w, st, sk in _wo_mid_tiles()]


def int4_mid_grid():
    return Q.candidate_configs(128, 4096, 4096) + [Q._tma_wgmma(bm, bn, bk, w, st, stream_k=sk)
                                                   for bm, bn, bk, w, st, sk in _wo_mid_tiles()]


def int8_wo_gemv_grid():
    out = []
    for bn, bk in [(2, 2048), (4, 1024), (4, 2048), (8, 256), (8, 512), (8, 1024), (16, 256), (16, 512), (32, 256)]:
        for warps in (4, 8):
            if bn * bk // (32 * warps) < 16:  # under 16 bytes a thread: no 16-byte loads
                continue
            for stages in (1, 2, 3, 4):
                out.append(W._gemv_config(bn, bk, warps, stages))
    for mt, wk, sub in [(1, 4, 1), (1, 8, 1), (1, 8, 2), (1, 2, 1), (1, 4, 2), (2, 4, 1)]:
        out.append(W._decode_config(mt, wk, sub=sub))
        out.append(W._decode_config(mt, wk, sub=sub, xpf=False))
    for mt, wk in [(1, 1), (1, 2), (2, 1), (1, 4)]:  # DIAG: M = 1 only
        out.append(W._decode_config(mt, wk, xpf=False, diag=True))
    return out


def int8_wo_grid():
    out = []
    for bn, bk, warps, stages in itertools.product((8, 16, 32), (256, 512, 1024), (4, 8), (2, 3, 4)):
        if bn * bk <= 16384:
            out.append(W._stream_config(bn, bk, warps, stages))
    for mt, wk, wm, sub, xpf in itertools.product((1, 2, 4), (2, 4, 8), (1, 2), (1, 2), (True, False)):
        if wk * wm <= 16 and mt * wm <= 4:
            out.append(W._decode_config(mt, wk, wm=wm, sub=sub, xpf=xpf))
    return out


def int4_small_grid():
    out = []
    for bn, chunks, warps, stages in itertools.product((16, 32, 64), (2, 4, 8), (2, 4, 8), (2, 3, 4, 6)):
        if chunks >= warps:
            out.append(Q._small(bn, chunks, warps, stages))
    return out


def int8_gemv_grid():
    out = []
    for bn, bk, warps, stages in itertools.product((4, 8, 16, 32), (256, 512, 1024, 2048), (4, 8), (1, 2, 3, 4)):
        if 2048 <= bn * bk <= 16384:
            out.append(I._gemv(bn, bk, warps, stages))
    return out


def int4_gemv_grid():
    out = []
    for bn, bk, warps, stages in itertools.product((4, 8, 16, 32), (512, 1024, 2048), (4, 8), (1, 2, 3, 4)):
        if 4096 <= bn * bk <= 32768:
            out.append(Q._gemv(bn, bk, warps, stages))
    return out


def int4_grid():
    out = []
    for mt, wk, wm, xpf in itertools.product((1, 2, 4), (1, 2, 4, 8), (1, 2), (True, False)):
        if wk * wm <= 16 and mt * wm <= 4:
            out.append(Q._decode(mt, wk, wm=wm, xpf=xpf))
    return out + [Q._decode(1, 1, wm=wm, diag=True) for wm in (1, 2)] + [Q._decode(2, 1, diag=True)]


def int4_dk64_grid():
    """The decode kernel on 64-deep chunks (every int4 grid before round 16 took DK 128): half the registers
    a trip (MT 4 / WK 4 at M = 16: 174 against 255), so more warps an SM; MAXNREG 168 lets three such
    programs share one."""
    out = []
    for mt, wk, wm, xpf in itertools.product((1, 2, 4), (2, 4, 8), (1, 2), (True, False)):
        if wk * wm <= 16 and mt * wm <= 4:
            out.append(Q._decode(mt, wk, wm=wm, dk=64, xpf=xpf))
    return out + [Q._decode(4, 4, dk=64, xpf=x, maxnreg=168) for x in (False, True)] + \
        [Q._decode(4, 4, xpf=False), Q._decode(2, 8)]  # and two DK 128 configs shipped at M = 16


def _diag_shapes():
    """(MT, WK, WM, SUB) of the DIAG programs tried with fewer chunks a slot (DG)."""
    return [(1, 1, 1, 1), (1, 1, 2, 1), (1, 2, 1, 1), (1, 4, 1, 1), (2, 1, 1, 1), (2, 2, 1, 1), (1, 2, 2, 1),
            (1, 2, 1, 2)]


def int4_dg_grid():
    """DIAG programs with DG = 2, 4 and 8 chunks of a row a slot (M <= 8 / DG)."""
    return [Q._decode(mt, wk, wm=wm, sub=sub, xpf=xpf, diag=True, dg=dg)
            for dg in (2, 4, 8) for mt, wk, wm, sub in _diag_shapes() for xpf in (True, False)]


def int8_wo_dg_grid():
    return [W._decode_config(mt, wk, wm=wm, sub=sub, xpf=xpf, diag=True, dg=dg)
            for dg in (2, 4, 8) for mt, wk, wm, sub in _diag_shapes() for xpf in (True, False)]


def int4_scale_in_grid():
    """The decode kernel with the weight scaled in the conversion (SCALE_IN: no float32 accumulator a chunk,
    255 -> ~181 registers at MT 4 and 16 x rows) and register caps (MAXNREG) that let more warps share an SM."""
    out = [Q._decode(4, 4, xpf=False), Q._decode(2, 8), Q._decode(2, 4)]  # the shipped M = 16 configs, as they are
    for mt, wk, xpf, cap in [(4, 4, False, None), (4, 4, False, 168), (4, 8, False, 128), (4, 8, False, 120),
                             (2, 4, True, None), (2, 4, False, None), (2, 8, False, 128), (2, 8, True, 128),
                             (1, 8, True, None), (2, 2, False, None), (4, 2, False, 168), (4, 4, True, None)]:
        out.append(Q._decode(mt, wk, xpf=xpf, scale_in=True, maxnreg=cap))
    # two chunk slots a warp and trip (SUB 2): half the trips, twice the bytes in flight a warp, in the
    # registers SCALE_IN frees
    for mt, wk, xpf in [(2, 4, False), (2, 4, True), (4, 4, False), (4, 2, False), (2, 8, False), (1, 8, False)]:
        out.append(Q._decode(mt, wk, sub=2, xpf=xpf, scale_in=True))
    return out


# family name -> (kernel module, grid builder)
GRIDS = {"fp8": (F, fp8_grid), "fp8m": (F, fp8_mid_grid), "fp8g": (F, fp8_gluon_grid), "fp8sw": (F, fp8_swap_grid),
         "int8": (I, int8_grid), "int8g": (I, int8_gemv_grid), "int8m": (I, int8_mid_grid),
         "int8l": (I, int8_large_grid), "int8lt": (I, int8_large_tma_grid), "int8w": (W, int8_wo_grid),
         "int8wg": (W, int8_wo_gemv_grid),
         "int4": (Q, int4_grid), "int4g": (Q, int4_gemv_grid), "int4s": (Q, int4_small_grid),
         "int4l": (Q, int4_large_grid), "int4d": (Q, int4_dg_grid), "int8wd": (W, int8_wo_dg_grid),
         "int4si": (Q, int4_scale_in_grid), "int4dk64": (Q, int4_dk64_grid),
         "int8wm": (W, int8_wo_mid_grid), "int4m": (Q, int4_mid_grid), "int8ms": (I, int8_mid_split_grid)}


def main():
    args = sys.argv[1:]
    fam = args.pop(0) if args and args[0] in GRIDS else "fp8"
    m = int(args.pop(0)) if args and args[0].isdigit() else 16
    shapes = [tuple(int(v) for v in a.split("x")) for a in args] or [(4096, 4096)]
    mod, grid = GRIDS[fam]
    configs = [c for c in grid() if m <= 4 or not c.get("DIAG")]  # DIAG programs are a kernel of M <= 4
    torch.manual_seed(0)
    for n, k in shapes:
        # every argument of the family's linear() after x
        inputs = mod.make_bench_inputs(n, k, torch.bfloat16) if mod is W else mod.make_bench_inputs(n, k)
        w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        shipped = mod.linear(x, *inputs)
        t_bf16 = tuning.gpu_time_ms(lambda: torch.nn.functional.linear(x, w)) * 1e3
        t_ship = tuning.gpu_time_ms(lambda: mod.linear(x, *inputs)) * 1e3
        print(f"{fam} {n}x{k} M={m}: bf16 {t_bf16:.2f} us; shipped {t_ship:.2f} us ({t_bf16 / t_ship:.2f}x)",
              flush=True)
        rows = []
        for cfg in configs:
            try:
                y = mod.linear(x, *inputs, config=cfg)
                d = (y.float() - shipped.float()).abs().max().item()
                t = tuning.gpu_time_ms(lambda: mod.linear(x, *inputs, config=cfg)) * 1e3
                rows.append((t, cfg, d))
            except Exception as exc:  # noqa: BLE001
                print(f"  failed {type(exc).__name__}: {str(exc)[:160]} {cfg}", flush=True)
        for t, cfg, d in sorted(rows, key=lambda r: r[0])[:25]:
            print(f"  {t:6.2f} us ({t_bf16 / t:.2f}x)  max|d| vs shipped {d:.3g}  {cfg}", flush=True)


if __name__ == "__main__":
    main()
