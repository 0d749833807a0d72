"""Eager A/B of configs through the layer's path (launch plans on), as the per-layer benchmark times it.

The sweep ranks configs by CUDA-graph GPU time. A config whose launches cost the host more (cuBLAS's
``_scaled_mm`` takes 50-130 µs of host time a call, a replayed Triton / Gluon launch ~10) can lose eagerly
what it wins on the GPU. For each config: the tuned-config memo is pointed at it, a fresh planned
``linear`` runs it (first call, recorded call, replays), then eager ``do_bench`` (warmup 25, rep 100, as
``bench layers``), the CUDA-graph GPU time and the host µs per call; two rounds in alternating order.

    PYTHONPATH=. python scripts/probe_eager_configs.py [SET (a key of CONFIGS)] [M,M,...] [NxK ...]

``int8`` (int8-dynamic at M = 64-128): the Triton pointer GEMM with split-K 4, which round 20 put back at 4096²
because the Gluon GEMM's split-K launches then cost the host too much eagerly, against that Gluon config.
"""
import sys

import torch
import triton.testing

from quantkit.bench.common import host_us_per_call
from quantkit.kernels import fp8_block as F
from quantkit.kernels import int4_weight_only as Q
from quantkit.kernels import int8_dynamic as I
from quantkit.kernels import int8_weight_only as W8
from quantkit.kernels import tuning
from quantkit.kernels.plan import planned

# the weight-only families' mid-M default at 1024 x 4096 before round 32 (both: the Gluon GEMM cut along K)
_MID_WO_BEFORE = W8._tma_wgmma_config(64, 64, 128, 4, 4, stream_k=True)

CONFIGS = {
    "fp8": (F, "fp8_block", [F._cublas(), F._gluon(128, 128, 8, 4, pdl=True, epi="tma"),
                             F._gluon(128, 128, 8, 4, pdl=True), F._gluon(128, 128, 8, 4, epi="tma")]),
    # fp8-block at M <= 256 (round 31): the Gluon GEMM with 64-wide tiles, plain and with split-K 2 / 4
    "fp8m": (F, "fp8_block", [F._gluon(128, 64, 8, 6, pdl=True), F._gluon(128, 64, 8, 6, pdl=True, split_k=2),
                              F._gluon(128, 64, 8, 6, pdl=True, split_k=4)]),
    # M = 17-64 (round 32): the table's entry ("shipped", None) against the decode kernel with 2-4 x tiles of 16
    # rows a weight tile (or 3-8 of 8). Round 32's call 1 timed the M = 16 entries' programs on the Llama shapes
    # (MT 2 / WK 2 / WM 2 in the place of the last one here); these are the small-N programs of its call 2.
    "fp8d": (F, "fp8_block", [None, F._decode(1, 4, dk=128, sub=2, xpf=False),
                              F._decode(1, 4, dk=128, sub=2, bm=8, xpf=False), F._decode(1, 4, dk=128)]),
    "int8d": (I, "int8_dynamic", [None, I._decode(1, 4, dk=128), I._decode(1, 4, dk=128, sub=2, bm=8, xpf=False),
                                  I._decode(1, 4, dk=128, sub=2, xpf=False)]),
    # round 32's entries at N <= 2048 (the decode kernel since: "shipped") against what ran there before: fp8-block
    # the M = 128 entry's split-K swap kernel at 1024 x 4096 (borrowed) and the default swap kernel elsewhere,
    # int8-dynamic its default two-pass GEMM
    "fp8k": (F, "fp8_block", [None, F._swap(64, 64, 2, 4, 3, False, split_k=4), F._swap(64, 64, 1, 4, 4, False)]),
    "int8k": (I, "int8_dynamic", [None, I._two_pass(64, 64, 128, 4, 4)]),
    # the weight-only families at N <= 2048, M = 17-64: the table / default (the Gluon GEMM, cut along K) against
    # the M = 16 entries' Triton programs at 1024 x 4096 (which take any M)
    # (and, last, the Gluon GEMM their defaults ran at N <= 1024 before round 32)
    # fp8-block at M = 17-64 on the Llama shapes (round 32's sweeps): the table's pick against the swap kernel
    # (64-row weight tiles as wgmma's A operand, 64 x rows) with PDL, split-K 4, split-K 2 with PDL
    "fp8s": (F, "fp8_block", [None, F._swap(64, 64, 2, 4, 3, False, pdl=True),
                              F._swap(64, 64, 2, 4, 3, False, split_k=4),
                              F._swap(64, 64, 2, 4, 3, False, split_k=2, pdl=True)]),
    "wo8k": (W8, "int8_weight_only", [None, W8._stream_config(16, 512, 4, 4), _MID_WO_BEFORE]),
    "int4k": (Q, "int4_weight_only", [None, Q._small(16, 4, 4, 4), _MID_WO_BEFORE]),
    "int4": (Q, "int4_weight_only", [Q._dequant_mm(), Q._tma_wgmma(persistent=True), Q._tma_wgmma()]),
    # round 33, shapes no table holds (None: the default): the weight-only families at 128 < M <= 256, 256 x 128
    # tiles against 128 x 64 (both persistent, stream-K); fp8-block at M > 256, cuBLAS against the Gluon GEMM;
    # int8-dynamic at 16 < M <= 64, against the round-32 defaults there (64 x 64 tiles, 128 x 128 split in two)
    "wo8m": (W8, "int8_weight_only", [None, W8._tma_wgmma_config(256, 128, 64, 8, 4, stream_k=True),
                                      W8._tma_wgmma_config(128, 64, 128, 4, 4, stream_k=True)]),
    "int4m": (Q, "int4_weight_only", [None, Q._tma_wgmma(256, 128, 64, 8, 4, stream_k=True),
                                      Q._tma_wgmma(128, 64, 128, 4, 4, stream_k=True)]),
    "fp8l": (F, "fp8_block", [None, F._cublas(), F._gluon(128, 128, 8, 4)]),
    # fp8-block at 16 < M <= 64 on wide layers (more N / 64 tiles than SMs): the default (2 K blocks a step, 3 stages,
    # PDL) against round 32's default (1 K block, 4 stages) with and without PDL, and without PDL itself
    "fp8w": (F, "fp8_block", [None, F._swap(64, 64, 1, 4, 4, False), F._swap(64, 64, 1, 4, 4, False, pdl=True),
                              F._swap(64, 64, 2, 4, 3, False)]),
    "int8m": (I, "int8_dynamic", [None, I._two_pass(64, 64, 128, 4, 4), I._two_pass(128, 128, 128, 8, 4, split_k=2)]),
    "int8": (I, "int8_dynamic", [I._two_pass(128, 128, 128, 8, 4, pdl=True, split_k=4),
                                 I._two_pass(128, 64, 128, 8, 6, mode="gluon", pdl=True, split_k=2),
                                 I._two_pass(128, 128, 128, 8, 4, mode="gluon", pdl=True)]),
}


def mod_config(mod, family, m, n, k):
    """The config the layer picked for this problem (the memo's entry after a call)."""
    return tuning._MEMO.get((family, tuning.m_bucket(m), n, k))


ROUNDS = int(__import__("os").environ.get("PROBE_ROUNDS", "2"))  # alternating order


def main():
    fam = sys.argv[1] if len(sys.argv) > 1 else "fp8"
    ms = [int(v) for v in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1024, 2048, 4096]
    shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[3:]] or [(4096, 4096), (14336, 4096),
                                                                              (4096, 14336)]
    mod, family, configs = CONFIGS[fam]
    for n, k in shapes:
        args = mod.make_bench_inputs(n, k, torch.bfloat16)
        w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            bf16 = triton.testing.do_bench(lambda: torch.nn.functional.linear(x, w), warmup=25, rep=100,
                                           return_mode="median") * 1e3
            print(f"{fam} {n}x{k} M={m}: bf16 eager {bf16:.1f} us", flush=True)
            for rnd in range(ROUNDS):
                for cfg in (configs if rnd % 2 == 0 else configs[::-1]):
                    if cfg is None:  # the shipped table's pick
                        tuning._MEMO.pop((family, tuning.m_bucket(m), n, k), None)
                    else:
                        tuning._MEMO[(family, tuning.m_bucket(m), n, k)] = cfg
                    fn = planned(mod.linear)
                    for _ in range(3):
                        fn(x, *args)
                    torch.cuda.synchronize()
                    kinds = {type(p).__name__ for p in fn.plans.values()}
                    eager = triton.testing.do_bench(lambda: fn(x, *args), warmup=25, rep=100,
                                                    return_mode="median") * 1e3
                    graph = tuning.gpu_time_ms(lambda: fn(x, *args), 25, 100) * 1e3
                    host = host_us_per_call(lambda: fn(x, *args))
                    print(f"  round {rnd}: eager {eager:7.1f} us ({bf16 / eager:.2f}x)  graph {graph:7.1f} us "
                          f"({bf16 / graph:.2f}x)  host {host:6.1f} us  plans {sorted(kinds)}  "
                          f"{cfg if cfg is not None else 'shipped ' + str(mod_config(mod, family, m, n, k))}",
                          flush=True)
            tuning._MEMO.pop((family, tuning.m_bucket(m), n, k), None)
            del x
        del args, w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
