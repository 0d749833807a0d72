"""Tuned decode configs judged inside the decode step they serve: the CUDA-graph decode step of the
Llama-3-8B-shaped decoder (`bench e2e`'s step), timed with each variant of some table entries, in
alternating rounds on one model.

The sweep times each layer alone with L2 flushed; inside a decode step x is hot in L2 and each kernel
starts behind the one before, so two configs that tie alone may not tie there (notes/int8_dynamic.md,
round 13). A variant sets the config of one or more (family, M, N, K) problems through the tuned-config
memo, drops the recorded launch plans, and captures the step again.

    PYTHONPATH=. python scripts/probe_decode_step_configs.py SET [--rounds 3] [--steps 100] [--json FILE]

SET names one of VARIANT_SETS below.
"""
from __future__ import annotations

import argparse
import statistics

import torch

from quantkit.kernels import fp8_block, int8_dynamic, tuning
from quantkit.ops import dispatch
from scripts.probe_decode_step_kernels import _captured, append_json, decode_step, replay_ms
from scripts.probe_eager_configs import _MID_WO_BEFORE  # the weight-only "before" of the eager A/B


def _d4(mt, wk, wm=1, xpf=True, diag=False):
    return {"kernel": "decode", "MT": mt, "WK": wk, "WM": wm, "DK": 128, "SUB": 1, "XPF": xpf,
            **({"DIAG": True} if diag else {})}


def _d8(mt, wk, wm=1, xpf=True, diag=False, dk=64):
    return {"kernel": "decode", "MT": mt, "WK": wk, "WM": wm, "DK": dk, "SUB": 1, "XPF": xpf,
            **({"DIAG": True} if diag else {})}


_STREAM8 = {"BLOCK_K": 512, "BLOCK_M": 16, "BLOCK_N": 16, "kernel": "stream", "num_stages": 4, "num_warps": 4}
_SMALL4 = {"BLOCK_N": 16, "CHUNKS": 4, "kernel": "small", "num_stages": 4, "num_warps": 4}

_SHAPES = ((4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336))


def _all_m1(family: str, config: dict, shapes=_SHAPES) -> dict:
    return {(family, 1, n, k): config for n, k in shapes}


def _all_m(m: int, family: str, config_for_n, shapes=_SHAPES) -> dict:
    return {(family, m, n, k): config_for_n(n) for n, k in shapes}


_F8 = fp8_block._decode
_I8 = int8_dynamic._decode

# (recipe, batch, {variant name: {(family, m, n, k): config, ...}}); "shipped" changes nothing.
VARIANT_SETS = {
    "int4_b1_4096": ("int4-weight-only", 1, {
        "shipped": {},
        "diag_wk1_wm2": {("int4_weight_only", 1, 4096, 4096): _d4(1, 1, 2, diag=True)},
        "decode_mt1_wk4": {("int4_weight_only", 1, 4096, 4096): _d4(1, 4)},
        "diag_mt2_wk2": {("int4_weight_only", 1, 4096, 4096): _d4(2, 2, xpf=False, diag=True)},
        "diag_wk2_wm2": {("int4_weight_only", 1, 4096, 4096): _d4(1, 2, 2, xpf=False, diag=True)},
    }),
    "int4_b1_wide": ("int4-weight-only", 1, {
        "shipped": {},
        "gate_up_diag_wk1_wm2": {("int4_weight_only", 1, 14336, 4096): _d4(1, 1, 2, diag=True)},
        "gate_up_diag_mt2_wk2": {("int4_weight_only", 1, 14336, 4096): _d4(2, 2, xpf=False, diag=True)},
        "gate_up_decode_mt1_wk8": {("int4_weight_only", 1, 14336, 4096): _d4(1, 8)},
        "down_decode_mt1_wk4": {("int4_weight_only", 1, 4096, 14336): _d4(1, 4)},
        "down_diag_wk1_wm2": {("int4_weight_only", 1, 4096, 14336): _d4(1, 1, 2, diag=True)},
    }),
    "int4_b1_gate_up_xpf": ("int4-weight-only", 1, {  # round 25: x loaded at use (2.3 % faster alone)
        "shipped": {},
        "gate_up_decode_mt1_wk4_x_at_use": {("int4_weight_only", 1, 14336, 4096): _d4(1, 4, xpf=False)},
    }),
    "int8wo_b1_wide": ("int8-weight-only", 1, {
        "shipped": {},
        "gate_up_diag_wk2": {("int8_weight_only", 1, 14336, 4096): _d8(1, 2, xpf=False, diag=True)},
        "gate_up_decode_mt1_wk4": {("int8_weight_only", 1, 14336, 4096): _d8(1, 4)},
        "down_diag_wk1": {("int8_weight_only", 1, 4096, 14336): _d8(1, 1, xpf=False, diag=True)},
        "down_decode_mt1_wk4": {("int8_weight_only", 1, 4096, 14336): _d8(1, 4)},
    }),
    "int4_b16_4096": ("int4-weight-only", 16, {
        "shipped": {},
        "decode_mt1_wk4": {("int4_weight_only", 16, 4096, 4096): _d4(1, 4)},
        "decode_mt2_wk4": {("int4_weight_only", 16, 4096, 4096): _d4(2, 4, xpf=False)},
        "decode_mt1_wk8": {("int4_weight_only", 16, 4096, 4096): _d4(1, 8, xpf=False)},
    }),
    "fp8_b1": ("fp8-block", 1, {
        "shipped": {},
        "diag_mt1_wk4": _all_m1("fp8_block", _F8(1, 4, dk=128, bm=8, diag=True)),
        "diag_mt2_wk2": _all_m1("fp8_block", _F8(2, 2, dk=128, bm=8, diag=True)),
        "diag_wide_only": _all_m1("fp8_block", _F8(1, 4, dk=128, bm=8, diag=True), _SHAPES[2:]),
    }),
    "int8dyn_b1": ("int8-dynamic", 1, {
        "shipped": {},
        "diag_mt1_wk4": _all_m1("int8_dynamic", _I8(1, 4, dk=128, bm=8, diag=True)),
        "diag_mt2_wk2": _all_m1("int8_dynamic", _I8(2, 2, dk=128, bm=8, diag=True)),
        "diag_wide_only": _all_m1("int8_dynamic", _I8(1, 4, dk=128, bm=8, diag=True), _SHAPES[2:]),
    }),
    "fp8_b16": ("fp8-block", 16, {
        "shipped": {},
        "fused_all": _all_m(16, "fp8_block", fp8_block._fused_default),
        "fused_wide_only": _all_m(16, "fp8_block", fp8_block._fused_default, _SHAPES[2:]),
    }),
    "fp8_b16_gate_up_xpf": ("fp8-block", 16, {  # round 25: the table's x at use against x a trip ahead
        "shipped": {},
        "gate_up_x_a_trip_ahead": {("fp8_block", 16, 14336, 4096): fp8_block._decode(2, 2, wm=2, dk=128)},
    }),
    "fp8_b16_sub2": ("fp8-block", 16, {  # round 27: two chunks a warp and trip, x at use (5-9 % faster alone)
        "shipped": {},
        "sub2_4096_and_down": {("fp8_block", 16, n, k): fp8_block._decode(1, 4, dk=128, sub=2, xpf=False)
                               for n, k in ((4096, 4096), (4096, 14336))},
        "sub2_down": {("fp8_block", 16, 4096, 14336): fp8_block._decode(1, 4, dk=128, sub=2, xpf=False)},
        "sub2_4096": {("fp8_block", 16, 4096, 4096): fp8_block._decode(1, 4, dk=128, sub=2, xpf=False)},
        "round26_sub1": {("fp8_block", 16, n, k): fp8_block._decode(1, 4, dk=128)  # the entries before round 27
                         for n, k in ((4096, 4096), (4096, 14336))},
    }),
    "fp8_b16_kv_sub2": ("fp8-block", 16, {  # round 27: the k / v projections with SUB 2, 8 x rows (-6.9 % alone)
        "shipped": {},
        "kv_sub2_bm8": {("fp8_block", 16, 1024, 4096): fp8_block._decode(1, 4, dk=128, sub=2, bm=8, xpf=False)},
    }),
    "int8wo_b16_down_dk128": ("int8-weight-only", 16, {  # round 27: 128-deep chunks, eight warps (-2.9 % alone)
        "shipped": {},
        "down_mt1_wk8_dk128": {("int8_weight_only", 16, 4096, 14336): _d8(1, 8, xpf=False, dk=128)},
    }),
    "int8dyn_b16_kv_sub2": ("int8-dynamic", 16, {  # round 27: fp8-block's k / v program on int8 codes
        "shipped": {},
        "kv_sub2_bm8": {("int8_dynamic", 16, 1024, 4096): int8_dynamic._decode(1, 4, dk=128, sub=2, bm=8,
                                                                              xpf=False)},
        "kv_sub2_bm8_xpf": {("int8_dynamic", 16, 1024, 4096): int8_dynamic._decode(1, 4, dk=128, sub=2, bm=8)},
    }),
    # round 32: the k / v projections at batch 32 / 64 on the decode kernel (the tables' entries since) against
    # what ran there before (fp8: the M = 128 entry's split-K swap kernel, borrowed; int8: the default GEMM)
    **{f"{name}_b{b}_kv": (recipe, b, {"shipped": {}, "before": {(family, b, 1024, 4096): before}})
       for name, recipe, family, before in (
           ("fp8", "fp8-block", "fp8_block", fp8_block._swap(64, 64, 2, 4, 3, False, split_k=4)),
           ("int8dyn", "int8-dynamic", "int8_dynamic", int8_dynamic._two_pass(64, 64, 128, 4, 4)))
       for b in (32, 64)},
    # fp8-block at batch 32 / 64 with every round-32 H100 entry against what ran there before (the Gluon GEMM
    # entries of M = 64 / 128, borrowed, and the k / v projections' split-K swap kernel)
    **{f"fp8_b{b}_round32": ("fp8-block", b, {"shipped": {}, "before": {
        ("fp8_block", b, 14336, 4096): fp8_block._gluon(128, 64, 8, 6, pdl=True),
        ("fp8_block", b, 1024, 4096): fp8_block._swap(64, 64, 2, 4, 3, False, split_k=4),
        **({("fp8_block", b, 4096, 14336): fp8_block._gluon(128, 64, 8, 6, pdl=True, split_k=2)} if b == 32 else {})}})
       for b in (32, 64)},
    # the weight-only families' k / v projections at batch 32 / 64 on the M = 16 Triton programs (the tables'
    # entries since) against the Gluon GEMM of their mid-M defaults before
    **{f"{name}_b{b}_kv": (recipe, b, {"shipped": {}, "before": {(family, b, 1024, 4096): _MID_WO_BEFORE}})
       for name, recipe, family in (("int4", "int4-weight-only", "int4_weight_only"),
                                    ("int8wo", "int8-weight-only", "int8_weight_only"))
       for b in (32, 64)},
    "int8dyn_b16": ("int8-dynamic", 16, {
        "shipped": {},
        "fused_all": _all_m(16, "int8_dynamic", int8_dynamic._fused_default),
        "fused_wide_only": _all_m(16, "int8_dynamic", int8_dynamic._fused_default, _SHAPES[2:]),
    }),
    "int4_b16_wide": ("int4-weight-only", 16, {
        "shipped": {},
        "gate_up_mt2_wk4": {("int4_weight_only", 16, 14336, 4096): _d4(2, 4)},
        "gate_up_mt4_wk4_xpf": {("int4_weight_only", 16, 14336, 4096): _d4(4, 4)},
        "gate_up_mt2_wk8": {("int4_weight_only", 16, 14336, 4096): _d4(2, 8, xpf=False)},
        "down_mt4_wk4": {("int4_weight_only", 16, 4096, 14336): _d4(4, 4, xpf=False)},
        "down_mt1_wk8": {("int4_weight_only", 16, 4096, 14336): _d4(1, 8)},
    }),
    "int8wo_b16_wide": ("int8-weight-only", 16, {
        "shipped": {},
        "gate_up_mt1_wk4": {("int8_weight_only", 16, 14336, 4096): _d8(1, 4)},
        "gate_up_mt2_wk4_dk128": {("int8_weight_only", 16, 14336, 4096): _d8(2, 4, dk=128)},
        "gate_up_mt4_wk4": {("int8_weight_only", 16, 14336, 4096): _d8(4, 4, xpf=False)},
    }),
    "int8wo_b16": ("int8-weight-only", 16, {
        "shipped": {},
        "decode_4096": {("int8_weight_only", 16, 4096, 4096): _d8(2, 4)},
        "decode_4096_mt1": {("int8_weight_only", 16, 4096, 4096): _d8(1, 4)},
        "decode_down": {("int8_weight_only", 16, 4096, 14336): _d8(2, 4)},
        "decode_kv": {("int8_weight_only", 16, 1024, 4096): _d8(1, 4)},
    }),
}


def _drop_plans() -> None:
    for impl in dispatch._RESOLVED.values():
        plans = getattr(impl, "plans", None)
        if plans is not None:
            plans.clear()


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("set", choices=sorted(VARIANT_SETS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    recipe, batch, variants = VARIANT_SETS[args.set]
    device = torch.device("cuda")
    one_step, pos, prompt_len = decode_step(recipe, args.layers, batch, args.steps + 8)
    times: dict[str, list[float]] = {name: [] for name in variants}
    saved = dict(tuning._MEMO)
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            tuning._MEMO.clear()
            tuning._MEMO.update(saved)
            for (family, m, n, k), config in variants[name].items():
                tuning._MEMO[(family, tuning.m_bucket(m), n, k)] = config
            _drop_plans()
            pos.fill_(prompt_len)
            graph = _captured(one_step, device)
            pos.fill_(prompt_len)
            for _ in range(3):
                graph.replay()
            pos.fill_(prompt_len)
            times[name].append(replay_ms(graph, args.steps))
            del graph
    row = {"set": args.set, "recipe": recipe, "batch": batch, "steps": args.steps,
           "ms_per_step": {name: [round(t, 4) for t in ts] for name, ts in times.items()},
           "median": {name: round(statistics.median(ts), 4) for name, ts in times.items()}}
    base = row["median"]["shipped"]
    for name, med in row["median"].items():
        print(f"{args.set} {name:<18} {med:.4f} ms/step ({(med / base - 1) * 100:+.2f} %)  rounds {times[name]}")
    return append_json(args.json, row)


if __name__ == "__main__":
    main()
