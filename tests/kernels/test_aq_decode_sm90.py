"""The Gluon decode kernel for 8-bit activations × 8-bit weights on sm_90 (quantkit.kernels.aq_decode_sm90),
as the int8-dynamic and fp8-block recipes run it at M <= 16 (and to 64 where a table picks it).

Gluon kernels do not run in Triton's interpreter, so on the CPU: the K permutation the kernel applies
to the loaded bytes is checked against the m16n8k32 fragment layout of the PTX ISA, and every decode
candidate of both families (plus fp16 / fp32 outputs, a bias, 8 and 16 x rows, an odd trip count,
without PDL) is compiled for sm_90 with triton's ptxas: no spills, the 8-bit ``mma.sync``, 16-byte
loads, no shared memory or shuffle up to the last mma (the loaded bytes are the fragments), and the
grid-dependency wait exactly when launched with PDL.
On the GPU: int8 outputs bit-identical to the fused kernels' (both exact int32 products and the same
epilogue), fp8 outputs within the family's bound of the float32 reference of the same codes, at M 1-64,
N and K edges, every candidate, bf16 / fp16 / fp32, a bias, strided rows, a 64-wide fp8 block, the
fallbacks, and a CUDA graph of the two launches with PDL.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from tests.helpers import assert_graph_replays_like
from tests.kernels.test_int8_weight_only import _sm90_tools, run_sm90_check

fk = pytest.importorskip("quantkit.kernels.fp8_block")
ik = pytest.importorskip("quantkit.kernels.int8_dynamic")


def _decode_configs() -> list[dict]:
    """Every decode config either family's sweep may pick, once."""
    seen = {}
    for cands in (fk._GLUON_DECODE, ik._DECODE_CANDIDATES):
        for c in cands:
            key = tuple((k, c[k]) for k in ("MT", "WK", "WM", "DK", "SUB", "BM"))
            seen.setdefault(key, c)
    return list(seen.values())


# --------------------------------------------------------------------------- CPU
@pytest.mark.parametrize("dk", [64, 128])
def test_k_permutation_puts_each_loaded_byte_on_its_fragment(dk):
    """Lane 4r + c loads bytes [c·DK/4, (c + 1)·DK/4) of a chunk (word ω = byte // 4). After the
    kernel's renaming, logical column k of the chunk must be the byte that the m16n8k32 A fragment
    (and B fragment) of that lane holds for k: k step s = k // 32, register half h = (k % 32) // 16
    (a0/a1 vs a2/a3, b0 vs b1), column group c = (k % 16) // 4, byte j = k % 4, i.e. word ω = 2s + h.
    Only the kernel's order of the four renamed axes passes."""
    import itertools

    from quantkit.kernels.aq_decode_sm90 import K_PERM

    c, s, h, j = np.indices((4, dk // 32, 2, 4))
    physical = c * (dk // 4) + 4 * (2 * s + h) + j  # [c, s, h, j]: the loaded order
    k = np.arange(dk)
    kk = k % 32
    fragment = ((kk % 16) // 4) * (dk // 4) + 4 * (2 * (k // 32) + kk // 16) + kk % 4

    def renamed(perm):  # what _logical does to the loaded values
        return np.transpose(physical[None, None], perm).reshape(-1)

    kernel = tuple(int(p) for p in K_PERM.value)
    assert sorted(renamed(kernel).tolist()) == list(range(dk))
    assert np.array_equal(renamed(kernel), fragment), f"DK={dk}: {renamed(kernel)} != {fragment}"
    passing = [p for p in itertools.permutations(range(2, 6)) if np.array_equal(renamed((0, 1) + p), fragment)]
    assert passing == [kernel[2:]]


def test_bad_decode_configs_are_rejected():
    from quantkit.kernels.aq_decode_sm90 import check_config, config

    check_config(config(1, 4))
    for bad in [dict(config(1, 4), DK=96), dict(config(1, 4), DK=32), dict(config(1, 4), WK=3), dict(config(1, 4), BM=4),
                dict(config(1, 4), MT=8), dict(config(1, 4), SUB=8), dict(config(1, 16), WM=2),
                {"kernel": "decode", "MT": 1}]:
        with pytest.raises(ValueError, match="decode config"):
            check_config(bad)
    with pytest.raises(ValueError, match="PDL"):
        ik._check_config(dict(ik._decode(1, 4), PDL=1))
    with pytest.raises(ValueError, match="PDL"):
        fk._check_config(dict(fk._decode(1, 4), PDL="yes"), 128)
    with pytest.raises(ValueError, match="TILED"):
        check_config(dict(config(1, 4), TILED=1))
    with pytest.raises(ValueError, match="fuse_act_quant"):
        fk._check_config(dict(fk._decode(1, 4), fuse_act_quant=True), 128)
    # the kernel's options pass both families' checks: DIAG with DG (chunks a slot), TILED, x at use
    for cfg in (dict(config(1, 4), DIAG=True, DG=2), dict(config(1, 4), TILED=True), dict(config(1, 4), XPF=False)):
        check_config(cfg)
        ik._check_config(dict(ik._decode(1, 4), **{k: cfg[k] for k in ("DIAG", "DG", "TILED", "XPF") if k in cfg}))
        fk._check_config(dict(fk._decode(1, 4), **{k: cfg[k] for k in ("DIAG", "DG", "TILED", "XPF") if k in cfg}), 128)
    for bad, what in ((dict(config(1, 4), DIAG=True, DG=3), "DG"), (dict(config(1, 4), DG=2), "DG"),
                      (dict(config(1, 4), XPF=0), "XPF")):
        with pytest.raises(ValueError, match=what):
            check_config(bad)
        with pytest.raises(ValueError, match=what):
            ik._check_config(dict(ik._decode(1, 4), **{k: bad[k] for k in ("DIAG", "DG", "XPF") if k in bad}))


def test_decode_falls_back_where_the_kernel_cannot_run(kernel_device):
    """Off sm_90 (here: the interpreter) a decode config runs the family's fused default: the same
    outputs as that config."""
    torch.manual_seed(0)
    x = torch.randn(5, 256, dtype=torch.bfloat16, device=kernel_device)
    w = torch.randn(40, 256, device=kernel_device) * 0.02
    if kernel_device == "cuda" and torch.cuda.get_device_capability()[0] == 9:
        pytest.skip("sm_90 runs the decode kernel itself (GPU tests below)")
    wq, ws = ik.quantize_weight(w)
    assert torch.equal(ik.linear(x, wq, ws, config=ik._decode(1, 4)), ik.linear(x, wq, ws, config=ik._fused_default(40)))
    fq, fs = fk.quantize_weight(w)
    assert torch.equal(fk.linear(x, fq, fs, config=fk._decode(1, 4)),
                       fk.linear(x, fq, fs, config=fk._fused_default(40)))
    x20 = torch.randn(20, 256, dtype=torch.bfloat16, device=kernel_device)  # past 16: the default GEMM
    for fam, q, s in ((ik, wq, ws), (fk, fq, fs)):
        gemm = fam._gemm_default(20, 40, 256)
        assert gemm["kernel"] != "decode" and fam.default_config(20, 40, 256)["kernel"] == "decode"
        assert torch.equal(fam.linear(x20, q, s, config=fam._decode(1, 4)), fam.linear(x20, q, s, config=gemm))
        assert torch.equal(fam.linear(x20, q, s), fam.linear(x20, q, s, config=gemm))  # (the default: decode)


def test_mid_m_candidates_and_defaults_hold_the_decode_programs():
    """16 < M <= MAX_M: each family's sweep may pick the decode kernel (at most 8 candidates, no repeats),
    and narrow layers default to it; past MAX_M, and on wide layers, a GEMM."""
    from quantkit.kernels.aq_decode_sm90 import MAX_M

    for fam in (fk, ik):
        for m in (17, 32, MAX_M):
            cands = fam.candidate_configs(m, 1024, 4096)
            assert len(cands) <= 8 and len({tuple(sorted(c.items())) for c in cands}) == len(cands)
            assert all(c in cands for c in fam._MID_DECODE)
            assert fam.default_config(m, 1024, 4096) == fam._MID_DECODE[0]
            assert fam.default_config(m, 4096, 4096)["kernel"] != "decode"
            assert fam.default_config(m, 1024, 4000)["kernel"] != "decode"  # K not a multiple of the chunk
        assert not any(c["kernel"] == "decode" for c in fam.candidate_configs(MAX_M + 1, 1024, 4096))
        assert fam.default_config(MAX_M + 1, 1024, 4096)["kernel"] != "decode"


def _compile(cfg, bm, fp8, bias=False, even=True, pdl=True, group=128, dtype="bf16", dg=1):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from quantkit.kernels import aq_decode_sm90 as d

    fn = d._decode8_kernel
    codes = "*fp8e4nv" if fp8 else "*i8"
    sig = dict(xq_ptr=codes, xs_ptr="*fp32", w_ptr=codes, ws_ptr="*fp32", b_ptr=f"*{dtype}", y_ptr=f"*{dtype}",
               M="i32", N="i32", K="i32", stride_xq="i32", stride_xsm="i32", stride_xsg="i32", stride_wsn="i32",
               stride_wsg="i32", stride_ym="i32", NUM_CHUNKS="i32", TRIPS="i32")
    mt, wk, wm, dk, sub = (cfg[k] for k in ("MT", "WK", "WM", "DK", "SUB"))
    bn = 16 * mt * wm
    consts = dict(FP8=fp8, GROUP=group if fp8 else 1, DK=dk, BM=bm, MT=mt, WK=wk, WM=wm, SUB=sub, HAS_BIAS=bias,
                  EVEN=even, WAIT_PRIOR=pdl, W_LAYOUT=d.operand_layout(wk, wm, bn, dk, sub, True),
                  X_LAYOUT=d.operand_layout(wk, wm, bm, dk, sub, False), num_warps=wk * wm,
                  TILED=cfg.get("TILED", False), DG=dg, XPF=cfg.get("XPF", True))
    sig.update({k: "constexpr" for k in consts})
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]]
             for a in ("xq_ptr", "xs_ptr", "w_ptr", "ws_ptr", "b_ptr", "y_ptr", "N", "K", "stride_xq", "stride_ym")}
    opts = dict(num_warps=wk * wm)
    if not fp8:
        opts["enable_fp_fusion"] = False
    return triton.compile(GluonASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32), options=opts)


def _compile_jobs():
    jobs = [(c, bm, fp8, False, True, True, "bf16") for c in _decode_configs() for bm in (8, 16)
            for fp8 in (False, True) if bm <= c["BM"]]
    first = _decode_configs()[0]
    jobs += [(first, 16, fp8, True, False, False, dt) for fp8 in (False, True) for dt in ("fp16", "fp32")]
    jobs += [(dict(first, TILED=True), 16, fp8, False, even, True, "bf16") for fp8 in (False, True)
             for even in (True, False)]  # the tiled weight layout: only the addresses change
    jobs += [(dict(c, XPF=False), 16, fp8, False, even, True, "bf16") for c in _decode_configs()[:2]
             for fp8 in (False, True) for even in (True, False)]  # x at use: the same loads, later
    return [j + (1,) for j in jobs] + _diag_jobs()


def _diag_jobs():
    """The M = 2-4 candidates' DIAG configs with 4 and 2 chunks a slot (and 8, as at M = 1), masked trips
    and a bias among them."""
    diag = [c for c in fk._DECODE_4 + ik._DECODE_4_CANDIDATES if c.get("DIAG")]
    seen = {tuple((k, c[k]) for k in ("MT", "WK", "WM", "DK", "SUB")): c for c in diag}
    return [(c, 8, fp8, i % 2 == 0, i % 3 != 0, True, "bf16", dg) for i, c in enumerate(seen.values())
            for fp8 in (False, True) for dg in (2, 4, 8)]


def _decode8_check_main() -> None:
    """Compile every job of :func:`_compile_jobs` for sm_90; print a line each, 'ok' last."""
    failures = []
    for cfg, bm, fp8, bias, even, pdl, dtype, dg in _compile_jobs():
        kernel = _compile(cfg, bm, fp8, bias, even, pdl, dtype=dtype, dg=dg)
        info, sass = _sm90_tools(kernel)
        spills = int(re.search(r"(\d+) bytes spill stores", info).group(1))
        regs = int(re.search(r"Used (\d+) registers", info).group(1))
        ptx = kernel.asm["ptx"]
        mma = "mma.sync.aligned.m16n8k32.row.col." + ("f32.e4m3.e4m3.f32" if fp8 else "satfinite.s32.s8.s8.s32")
        loop = ptx[:ptx.rindex("mma.sync")]
        moves_nothing = "st.shared" not in loop and "shfl.sync" not in loop and "ld.shared" not in loop
        weight_v4 = "ld.global.L1::evict_first.L2::cache_hint.v4" in ptx
        waits = ("griddepcontrol.wait" in ptx) == pdl
        what = f"decode8 {cfg} BM={bm} fp8={fp8} bias={bias} even={even} pdl={pdl} {dtype} DG={dg}"
        print(f"{what}: regs={regs} spills={spills} mma={mma in ptx} moves_nothing={moves_nothing} "
              f"v4={weight_v4} wait={waits}")
        if spills or mma not in ptx or not moves_nothing or not weight_v4 or not waits:
            failures.append(what)
    if failures:
        print("FAILED:", failures)
        raise SystemExit(1)
    print("ok")


def test_decode8_candidates_compile_for_sm90():
    run_sm90_check("from tests.kernels.test_aq_decode_sm90 import _decode8_check_main; _decode8_check_main()")


# --------------------------------------------------------------------------- GPU
def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


needs_sm90 = pytest.mark.skipif(not _sm90(), reason="the decode kernel needs an sm_90 GPU")

# (M, N, K): one row, a partial x tile, N not a multiple of 16 (rows clamped), trip counts odd and even,
# a single chunk, 16 rows; past 16 (2-4 x tiles a weight tile, up to MAX_M = 64): a one-row last tile,
# full tiles, a partial one
SHAPES = [(1, 4096, 4096), (3, 45, 256), (7, 1000, 320), (9, 33, 128), (16, 257, 1152), (16, 4096, 14336),
          (12, 64, 64), (17, 300, 1024), (32, 4096, 4096), (50, 129, 640), (64, 1000, 256)]


def _usable(x, wq, cfg, group=None) -> bool:
    from quantkit.kernels import aq_decode_sm90

    return aq_decode_sm90.usable(x, wq, cfg, group)


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_int8_decode_is_bit_identical_to_the_fused_kernels_gpu(dtype):
    from tests.kernels.test_int8_dynamic import make_problem

    torch.manual_seed(1)
    ran = 0
    for m, n, k in SHAPES:
        x, wq, ws, b = make_problem(m, n, k, dtype, m % 2 == 1, "cuda")
        want = ik.linear(x, wq, ws, b, config=ik._fused_default(n))
        for cfg in ik._DECODE_CANDIDATES if dtype == torch.bfloat16 else ik._DECODE_CANDIDATES[2:4] + ik._DECODE_CANDIDATES[-1:]:
            if not _usable(x, wq, cfg):
                assert k % cfg["DK"], f"{cfg} should take M={m} N={n} K={k}"
                continue
            ran += 1
            y = ik.linear(x, wq, ws, b, config=cfg)
            assert torch.equal(y, want), (f"{cfg} M={m} N={n} K={k} {dtype}: {int((y != want).sum())} outputs differ "
                                          f"from the fused kernel's")
            if dtype == torch.bfloat16:
                assert torch.equal(y, ik.linear(x, wq, ws, b, config=dict(cfg, PDL=False))), f"{cfg}: PDL changes y"
    assert ran >= len(SHAPES)


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_fp8_decode_matches_the_reference_gpu(dtype):
    from tests.kernels.test_fp8_block import check_linear, make_problem

    torch.manual_seed(2)
    ran = 0
    for m, n, k in SHAPES:
        x, _, wq, ws, b = make_problem(m, n, k, dtype, m % 2 == 1, "cuda")
        for cfg in fk._GLUON_DECODE if dtype == torch.bfloat16 else fk._GLUON_DECODE[1:3] + fk._GLUON_DECODE[-2:]:
            if not _usable(x, wq, cfg, 128):
                assert k % cfg["DK"], f"{cfg} should take M={m} N={n} K={k}"
                continue
            ran += 1
            y = check_linear(x, wq, ws, b, f"{cfg} M={m} N={n} K={k} {dtype}", config=cfg)
            assert torch.equal(y, fk.linear(x, wq, ws, b, config=cfg)), f"{cfg}: not deterministic"
            if dtype == torch.bfloat16:
                assert torch.equal(y, fk.linear(x, wq, ws, b, config=dict(cfg, PDL=False))), f"{cfg}: PDL changes y"
    assert ran >= len(SHAPES)


@pytest.mark.gpu
@needs_sm90
def test_decode_past_max_m_runs_the_default_config_gpu():
    """MAX_M x rows take the decode kernel; one more runs the family's default config for the problem,
    with the same outputs as that config."""
    from quantkit.kernels.aq_decode_sm90 import MAX_M
    from tests.kernels.test_int8_dynamic import make_problem

    torch.manual_seed(4)
    n, k = 300, 1024
    x, wq, ws, b = make_problem(MAX_M + 1, n, k, torch.bfloat16, True, "cuda")
    fq, fs = fk.quantize_weight(torch.randn(n, k, device="cuda") * 0.02)
    for cfg in (ik._decode(1, 4, dk=128), fk._decode(1, 4, dk=128, sub=2, xpf=False)):
        assert _usable(x[:MAX_M], wq, cfg, 128) and not _usable(x, wq, cfg, 128)
    assert torch.equal(ik.linear(x, wq, ws, b, config=ik._decode(1, 4, dk=128)),
                       ik.linear(x, wq, ws, b, config=ik._gemm_default(MAX_M + 1, n, k)))
    cfg = fk._decode(1, 4, dk=128, sub=2, xpf=False)
    assert torch.equal(fk.linear(x, fq, fs, b, config=cfg),
                       fk.linear(x, fq, fs, b, config=fk._fit_block(fk._gemm_default(MAX_M + 1, n, k), 128)))
    # and MAX_M rows run the kernel: the same as its 16-row x tiles run one by one
    y = fk.linear(x[:MAX_M], fq, fs, b, config=cfg)
    parts = torch.cat([fk.linear(x[i:i + 16], fq, fs, b, config=cfg) for i in range(0, MAX_M, 16)])
    assert torch.equal(y, parts)


@pytest.mark.gpu
@needs_sm90
def test_decode_edges_gpu():
    """Strided x rows, a 64-wide fp8 block (the kernel with 16 and 32 rows a program; the fallbacks
    where DK or the program's rows exceed the block), ue8m0 scales, and the fp8 ``gemm`` entry point
    on codes quantized elsewhere."""
    from tests.kernels.test_fp8_block import assert_gemm_close, check_linear, make_problem, reference32
    from tests.kernels.test_int8_dynamic import make_problem as make_int8

    torch.manual_seed(3)
    big = torch.randn(6, 1024 + 40, device="cuda", dtype=torch.bfloat16)
    x = big[:, :1024]
    _, wq, ws, b = make_int8(6, 300, 1024, torch.bfloat16, True, "cuda")
    cfg = ik._decode(1, 4)
    assert _usable(x, wq, cfg)
    assert torch.equal(ik.linear(x, wq, ws, b, config=cfg), ik.linear(x.contiguous(), wq, ws, b, config=cfg))
    _, _, fq, fs, fb = make_problem(6, 300, 1024, torch.bfloat16, True, "cuda")
    check_linear(x, fq, fs, fb, "strided rows", config=fk._decode(1, 4))

    x64, _, wq64, ws64, b64 = make_problem(11, 200, 640, torch.bfloat16, True, "cuda", block=64)
    wide = fk._decode(4, 2, wm=2)  # 128 weight rows a program: more than one 64-row scale block
    assert _usable(x64, wq64, fk._decode(1, 4), 64) and _usable(x64, wq64, fk._decode(2, 4), 64)
    assert not _usable(x64, wq64, fk._decode(1, 4, dk=128), 64) and not _usable(x64, wq64, wide, 64)
    for cfg in (fk._decode(1, 4), fk._decode(2, 4), fk._decode(1, 4, dk=128), wide):  # the last two fall back
        check_linear(x64, wq64, ws64, b64, f"block 64 {cfg}", config=cfg, block=64)
    xe, _, wqe, wse, _ = make_problem(4, 256, 512, torch.bfloat16, False, "cuda", scale_fmt="ue8m0")
    check_linear(xe, wqe, wse, None, "ue8m0", config=fk._decode(1, 8), scale_fmt="ue8m0")

    x_q, x_s = fk.quantize_act(xe)
    ref, abs32 = reference32(x_q, x_s, wqe, wse, None)
    y = fk.gemm(x_q, x_s, wqe, wse, None, torch.float32, config=fk._decode(1, 4))
    assert_gemm_close(y, ref, abs32, "gemm() with a decode config")


@pytest.mark.gpu
@needs_sm90
def test_decode_allocates_only_the_output_block_gpu():
    """One allocation per call (codes and scales live behind the output), and the output is an
    ordinary [M, N] tensor over its leading part."""
    from tests.kernels.test_int8_dynamic import make_problem

    x, wq, ws, _ = make_problem(16, 4096, 4096, torch.bfloat16, False, "cuda")
    fq, fs = fk.quantize_weight(torch.randn(4096, 4096, device="cuda") * 0.02)
    for fn in (lambda: ik.linear(x, wq, ws, config=ik._decode(1, 4)), lambda: fk.linear(x, fq, fs, config=fk._decode(1, 4))):
        fn()
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        y = fn()
        after = torch.cuda.memory_stats()["allocation.all.allocated"]
        assert after - before == 1
        assert y.shape == (16, 4096) and y.is_contiguous() and y.storage_offset() == 0
        del y


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("m", [128, 1024])
def test_gemm_sizes_allocate_only_the_output_block_gpu(m):
    """Above decode sizes too, the two-kernel paths (quantization, then the Gluon or Triton GEMM, split-K
    partials included) keep the codes and scales behind the output: one allocation a call."""
    from tests.kernels.test_int8_dynamic import make_problem

    x, wq, ws, _ = make_problem(m, 4096, 4096, torch.bfloat16, False, "cuda")
    fq, fs = fk.quantize_weight(torch.randn(4096, 4096, device="cuda") * 0.02)
    for name, fn in (("int8 gluon split-K", lambda: ik.linear(x, wq, ws, config=ik._two_pass(
                         128, 64, 128, 8, 6, mode="gluon", pdl=True, split_k=2))),
                     ("int8 pointer split-K", lambda: ik.linear(x, wq, ws, config=ik._two_pass(
                         128, 128, 128, 8, 4, pdl=True, split_k=4))),
                     ("fp8 gluon", lambda: fk.linear(x, fq, fs, config=fk._gluon(128, 64, 8, 6, pdl=True))),
                     ("fp8 tiled", lambda: fk.linear(x, fq, fs, config=fk._tiled(64, 128, 4, 4, False)))):
        ref = fn().clone()
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        y = fn()
        after = torch.cuda.memory_stats()["allocation.all.allocated"]
        assert after - before == 1, name
        assert y.shape == (m, 4096) and y.is_contiguous() and y.storage_offset() == 0, name
        assert torch.equal(y, ref), name
        del y


@pytest.mark.gpu
@needs_sm90
def test_decode_with_pdl_in_cuda_graph_gpu():
    """The quantization and the decode kernel (a programmatic dependent) captured together: replays
    equal eager calls on new inputs."""
    from tests.kernels.test_int8_dynamic import make_problem

    x, wq, ws, b = make_problem(16, 4096, 4096, torch.bfloat16, True, "cuda")
    fq, fs = fk.quantize_weight(torch.randn(4096, 4096, device="cuda") * 0.02)
    fns = [lambda t: ik.linear(t, wq, ws, b, config=ik._decode(1, 8)),
           lambda t: fk.linear(t, fq, fs, b, config=fk._decode(1, 8))]
    for fn in fns:
        assert_graph_replays_like(fn, x.clone(), fn)


@pytest.mark.gpu
@needs_sm90
def test_tiled_weights_are_bit_identical_gpu():
    """A TILED config on the tiled codes gives bit for bit what its row-major twin gives (int8 and fp8,
    M 1 / 9 / 16, K with a partial trip, a bias); N not a multiple of 16 is refused."""
    from quantkit.kernels.wo_decode_sm90 import tile_weight
    from tests.kernels.test_fp8_block import make_problem as make_fp8
    from tests.kernels.test_int8_dynamic import make_problem as make_int8

    torch.manual_seed(4)
    for m in (1, 9, 16):
        for n, k, cfg in ((1024, 1280, ik._decode(1, 4, dk=128)), (2048, 4096, ik._decode(2, 2, dk=128)),
                          (512, 1088, ik._decode(1, 4))):
            x, wq, ws, b = make_int8(m, n, k, torch.bfloat16, m == 9, "cuda")
            y = ik.linear(x, wq, ws, b, config=cfg)
            tcfg = dict(cfg, TILED=True)
            assert torch.equal(y, ik.linear(x, tile_weight(wq, cfg["DK"]), ws, b, config=tcfg)), (m, n, k, cfg)
        for n, k, cfg in ((1024, 1280, fk._decode(1, 4, dk=128)), (2048, 4096, fk._decode(2, 2, wm=2, dk=128))):
            x, _, wq, ws, b = make_fp8(m, n, k, torch.bfloat16, m == 9, "cuda")
            y = fk.linear(x, wq, ws, b, config=cfg)
            tiled = tile_weight(wq.view(torch.uint8), cfg["DK"]).view(wq.dtype)
            assert torch.equal(y, fk.linear(x, tiled, ws, b, config=dict(cfg, TILED=True))), (m, n, k, cfg)
    x, wq, ws, _ = make_int8(4, 1000, 1024, torch.bfloat16, False, "cuda")
    with pytest.raises(ValueError, match="multiple of 16"):
        ik.linear(x, wq, ws, config=dict(ik._decode(1, 4), TILED=True))


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_diag_gpu(m):
    """DIAG configs (8 / 4 / 2 chunks of a row a slot at M = 1 / 2 / 3-4, or the config's DG = 2): int8
    bit-identical to the fused kernel (exact int32 sums, the same epilogue); fp8 within the reference
    bound; N off the tiles, K with partial trips, a bias."""
    from tests.kernels.test_fp8_block import check_linear
    from tests.kernels.test_fp8_block import make_problem as make_fp8
    from tests.kernels.test_int8_dynamic import make_problem as make_int8

    torch.manual_seed(5 + m)
    ran = 0
    for n, k in ((1000, 1280), (2048, 4096), (300, 1088)):
        for cfg in (ik._decode(1, 4, dk=128, diag=True), ik._decode(2, 2, dk=128, diag=True),
                    ik._decode(1, 4, diag=True), dict(ik._decode(2, 2, dk=128, diag=True), DG=2)):
            x, wq, ws, b = make_int8(m, n, k, torch.bfloat16, True, "cuda")
            if not _usable(x, wq, cfg):
                continue
            ran += 1
            want = ik.linear(x, wq, ws, b, config=ik._fused_default(n))
            assert torch.equal(ik.linear(x, wq, ws, b, config=cfg), want), f"int8 {cfg} M={m} N={n} K={k}"
        for cfg in (fk._decode(1, 4, dk=128, diag=True), fk._decode(2, 2, dk=128, diag=True),
                    fk._decode(1, 4, diag=True), dict(fk._decode(1, 4, diag=True), DG=2)):
            x, _, wq, ws, b = make_fp8(m, n, k, torch.bfloat16, True, "cuda")
            if not _usable(x, wq, cfg, 128):
                continue
            ran += 1
            check_linear(x, wq, ws, b, f"fp8 diag {cfg} M={m} N={n} K={k}", config=cfg)
    assert ran >= 12


@pytest.mark.gpu
@needs_sm90
def test_x_at_use_is_bit_identical_gpu():
    """XPF false (x codes and scales loaded at use) changes when x is loaded, not what is computed: outputs equal
    the prefetching config's, int8 and fp8, M 2 / 9 / 16, whole and partial trips, a bias."""
    from tests.kernels.test_fp8_block import make_problem as make_fp8
    from tests.kernels.test_int8_dynamic import make_problem as make_int8

    torch.manual_seed(5)
    for m in (2, 9, 16):
        for n, k, cfg in ((1024, 1280, ik._decode(1, 4, dk=128)), (2048, 4096, ik._decode(2, 2, dk=128)),
                          (512, 1088, ik._decode(1, 4))):
            x, wq, ws, b = make_int8(m, n, k, torch.bfloat16, m == 9, "cuda")
            assert _usable(x, wq, cfg)
            y = ik.linear(x, wq, ws, b, config=cfg)
            assert torch.equal(y, ik.linear(x, wq, ws, b, config=dict(cfg, XPF=False))), (m, n, k, cfg)
        for n, k, cfg in ((1024, 1280, fk._decode(1, 4, dk=128)), (2048, 4096, fk._decode(2, 2, wm=2, dk=128))):
            x, _, wq, ws, b = make_fp8(m, n, k, torch.bfloat16, m == 9, "cuda")
            assert _usable(x, wq, cfg, 128)
            y = fk.linear(x, wq, ws, b, config=cfg)
            assert torch.equal(y, fk.linear(x, wq, ws, b, config=dict(cfg, XPF=False))), (m, n, k, cfg)
