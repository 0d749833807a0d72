"""The Gluon fp8 block-scaled GEMM of fp8-block at large M (quantkit.kernels.f8_gemm_sm90).

Gluon kernels do not run in Triton's interpreter. On the CPU every config of the family that uses it
(and fp16 / fp32 outputs, a bias, PDL) is compiled for sm_90 with the ptxas that ships with triton: no
spills, the ring within an H100's shared memory, and the point of the kernel's structure — ptxas keeps
each K block's four wgmmas in one group (one ``WARPGROUP.DEPBAR`` per block, not per wgmma) and warns of
no serialization (C7514 / C7515). On the GPU its outputs are compared bit for bit with the Triton tiled
GEMM's (the same wgmma chain per K block and the same promotion, in the same order) at odd M, N and K,
every output dtype, with and without a bias, through ``gemm`` (row-major scales) and ``linear`` (K-major
scales), with more tiles than SMs (the persistent loop), with PDL and replayed from a CUDA graph;
problems it cannot take fall back and still match the reference.
"""
import re

import pytest
import torch

from quantkit.kernels import fp8_block as fk
from tests.helpers import assert_graph_replays_like
from tests.kernels.test_fp8_block import LLAMA, check_linear, make_problem
from tests.kernels.test_int8_weight_only import run_compile_jobs, run_sm90_check


def _gluon_configs():
    seen, out = set(), []
    for m in (128, 1024, 4096):
        for n, k in LLAMA:
            for c in fk.candidate_configs(m, n, k) + [fk.default_config(m, n, k)]:
                key = tuple(sorted(c.items()))
                if c["kernel"] == "gluon" and key not in seen:
                    seen.add(key)
                    out.append(c)
    return out


def _compile(cfg, out_dtype="bf16", bias=False):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from quantkit.kernels import f8_gemm_sm90 as g

    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], 128
    fp8 = g.gl.float8e4nv
    sig = dict(a_desc=f"tensordesc<fp8e4nv[{bm}, {bk}],{g._smem_layout(bm, bk, fp8)}>",
               b_desc=f"tensordesc<fp8e4nv[{bn}, {bk}],{g._smem_layout(bn, bk, fp8)}>", as_ptr="*fp32",
               stride_asm="i32", stride_ask="i32", bs_ptr="*fp32", stride_bsn="i32", stride_bsk="i32",
               bias_ptr=f"*{out_dtype}", c_ptr=f"*{out_dtype}", part_ptr="*fp32", M="i32", N="i32", K="i32",
               stride_cm="i32", K_ITERS="i32")
    epi_tma = cfg.get("EPI") == "tma"
    c_gl = {"bf16": g.gl.bfloat16, "fp16": g.gl.float16, "fp32": g.gl.float32}[out_dtype]
    sig["c_desc"] = f"tensordesc<{out_dtype}[64, {bn}],{g._smem_layout(64, bn, c_gl)}>" if epi_tma else sig["a_desc"]
    consts = dict(HAS_BIAS=bias, GROUP_M=cfg["GROUP_M"], STAGES=cfg["num_stages"], WAIT_PRIOR=bool(cfg.get("PDL")),
                  CONSUMER_REGS=g.CONSUMER_REGS, EPI_TMA=epi_tma, SPLIT_K=cfg.get("SPLIT_K", 1), num_warps=4)
    sig.update({k: "constexpr" for k in consts})
    sig = {name: sig[name] for name in g._f8_gemm_kernel.arg_names if name in sig}  # (in the kernel's argument order)
    return triton.compile(GluonASTSource(g._f8_gemm_kernel, sig, consts), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=4))


def _check_main() -> None:
    """Compile every Gluon config (bf16; the first also fp16 + bias and fp32 + bias); print a line each,
    'ok' last."""
    configs = _gluon_configs()
    jobs = [(c, "bf16", False) for c in configs] + [(configs[0], "fp16", True), (configs[0], "fp32", True)]

    def extra(kernel, info, sass):
        mmas = len(re.findall(r"QGMMA\.64x\d+x32", sass))
        depbars = len(re.findall(r"WARPGROUP\.DEPBAR", sass))
        ok = "C7514" not in info and "C7515" not in info and mmas and 4 * depbars <= mmas
        return f"wgmmas={mmas} depbars={depbars}", ok

    run_compile_jobs(jobs, _compile, extra)


def test_candidates_compile_for_sm90():
    assert _gluon_configs(), "no Gluon config among the candidates"
    run_sm90_check("from tests.kernels.test_f8_gemm_sm90 import _check_main; _check_main()")


def test_default_at_large_m_is_the_gluon_gemm_but_for_large_problems_with_a_long_k():
    assert fk.default_config(1024, 4096, 4096)["kernel"] == "gluon"  # 2^34 multiply-adds
    assert fk.default_config(2048, 8192, 2048)["kernel"] == "gluon"  # 2^35, a short K
    assert fk.default_config(2048, 4096, 4096)["kernel"] == ("cublas" if fk._CUBLAS_ALLOWED else "gluon")
    # where cuBLAS cannot run (or is switched off), our own GEMM of the same size
    assert fk._own_gemm_default(2048, 4096, 4096)["kernel"] == "gluon"
    assert fk._triton_gemm_config(2048, 4096, 4096, 128)["kernel"] == "gluon"


def test_gluon_config_checks():
    fk._check_config(fk._gluon(128, 128, 8, 4, pdl=True), 128)
    with pytest.raises(ValueError, match="BLOCK_M 128"):
        fk._check_config(fk._gluon(64, 128, 8, 4), 128)
    with pytest.raises(ValueError, match="BLOCK_M 128"):
        fk._check_config(fk._gluon(128, 128, 4, 4), 128)
    with pytest.raises(ValueError, match="fuse_act_quant"):
        fk._check_config(dict(fk._gluon(128, 128, 8, 4), fuse_act_quant=True), 128)
    fk._check_config(fk._gluon(128, 128, 8, 4, epi="tma"), 128)
    with pytest.raises(ValueError, match="EPI"):
        fk._check_config(fk._gluon(128, 128, 8, 4, epi="smem"), 128)
    with pytest.raises(ValueError, match="EPI"):
        fk._check_config(dict(fk._tiled(128, 128, 8, 4, True), EPI="tma"), 128)
    assert fk._fit_block(fk._gluon(128, 128, 8, 4), 64)["BLOCK_N"] == 64
    fk._check_config(fk._gluon(128, 64, 8, 6, pdl=True, split_k=2), 128)
    with pytest.raises(ValueError, match="SPLIT_K"):
        fk._check_config(fk._gluon(128, 64, 8, 6, split_k=3), 128)
    with pytest.raises(ValueError, match="SPLIT_K"):
        fk._check_config(dict(fk._tiled(128, 128, 8, 4, True), SPLIT_K=2), 128)
    # whole 128-deep blocks a split, none empty: K = 4224 is 33 blocks
    assert fk._split_count(fk._gluon(128, 64, 8, 6, split_k=4), 4224, 128, False) == 4
    assert fk._split_count(fk._gluon(128, 64, 8, 6, split_k=4), 256, 128, False) == 2
    assert fk._split_count(fk._gluon(128, 64, 8, 6), 4224, 128, False) == 1


def test_gluon_config_runs_the_tiled_kernel_on_the_cpu(kernel_device):
    """Where the Gluon kernel cannot run (here: no GPU) the config runs the Triton tiled GEMM."""
    if kernel_device != "cpu":
        pytest.skip("the CPU path")
    x, _, weight_q, weight_scale, b = make_problem(40, 96, 256, torch.bfloat16, True, "cpu")
    check_linear(x, weight_q, weight_scale, b, "gluon config on the CPU", config=fk._gluon(128, 128, 8, 4))
    # (split-K too: the tiled kernel runs unsplit, the partials carved behind the output go unused)
    check_linear(x, weight_q, weight_scale, b, "gluon split-K config on the CPU",
                 config=fk._gluon(128, 64, 8, 6, pdl=True, split_k=2))


# --------------------------------------------------------------------------- GPU
def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


needs_sm90 = pytest.mark.skipif(not _sm90(), reason="the Gluon GEMM needs an sm_90 GPU")
TILED = fk._tiled(128, 128, 8, 4, True)


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("mnk", [(1000, 4000, 4224), (333, 4096, 4000), (77, 384, 256), (1100, 2000, 512),
                                 (4096, 1024, 128), (4096, 4096, 1024), (300, 1001, 512)])
def test_bit_identical_to_the_tiled_gemm_gpu(out_dtype, mnk):
    """(TMA stores: 4096 × 4096 gives each program two or more tiles; N = 1001 has rows that are not
    16-byte aligned, so those configs store by rows.)"""
    m, n, k = mnk
    torch.manual_seed(m + n + k)
    x, _, weight_q, weight_scale, bias = make_problem(m, n, k, out_dtype, True, "cuda")
    x_q, x_s = fk.quantize_act(x)
    for cfg in (fk._gluon(128, 128, 8, 4), fk._gluon(128, 128, 8, 3, group_m=16), fk._gluon(128, 64, 8, 6, pdl=True),
                fk._gluon(128, 128, 8, 4, epi="tma"), fk._gluon(128, 64, 8, 5, pdl=True, epi="tma")):
        for b in (None, bias):
            y = fk.gemm(x_q, x_s, weight_q, weight_scale, b, out_dtype, config=cfg)
            assert torch.equal(y, fk.gemm(x_q, x_s, weight_q, weight_scale, b, out_dtype, config=TILED)), \
                f"gemm {mnk} {cfg} {out_dtype} bias={b is not None}"
        y = fk.linear(x, weight_q, weight_scale, bias, config=cfg)
        assert torch.equal(y, fk.linear(x, weight_q, weight_scale, bias, config=TILED)), f"linear {mnk} {cfg}"
    if out_dtype != torch.float32:  # (float32 outputs: the tiled kernel's own tests bound them; equal above)
        check_linear(x, weight_q, weight_scale, bias, f"gluon {mnk} {out_dtype}", config=fk._gluon(128, 128, 8, 4))


@pytest.mark.gpu
@needs_sm90
def test_problems_it_cannot_take_fall_back_gpu():
    """K not a multiple of 16 (no TMA), 256-wide blocks: the config runs the tiled kernel; 64-wide
    blocks run the Gluon kernel with 64-wide tiles."""
    x, _, weight_q, weight_scale, b = make_problem(300, 260, 1000, torch.bfloat16, True, "cuda")
    check_linear(x, weight_q, weight_scale, b, "K = 1000", config=fk._gluon(128, 128, 8, 4))
    x, _, weight_q, weight_scale, b = make_problem(300, 512, 1024, torch.bfloat16, True, "cuda", block=256)
    check_linear(x, weight_q, weight_scale, b, "block 256", config=fk._gluon(128, 128, 8, 4), block=256)
    x, _, weight_q, weight_scale, b = make_problem(300, 512, 1024, torch.bfloat16, True, "cuda", block=64)
    check_linear(x, weight_q, weight_scale, b, "block 64", config=fk._gluon(128, 64, 8, 4), block=64)


@pytest.mark.gpu
@needs_sm90
def test_pdl_and_cuda_graph_gpu():
    x, _, weight_q, weight_scale, bias = make_problem(1024, 2048, 4096, torch.bfloat16, True, "cuda")
    for epi in ("rows", "tma"):
        gluon = fk._gluon(128, 128, 8, 4, pdl=True, epi=epi)
        assert torch.equal(fk.linear(x, weight_q, weight_scale, bias, config=gluon),
                           fk.linear(x, weight_q, weight_scale, bias, config=TILED))
        assert_graph_replays_like(lambda t: fk.linear(t, weight_q, weight_scale, bias, config=gluon), x.clone(),
                                  lambda t: fk.linear(t, weight_q, weight_scale, bias, config=TILED))


def _split_k_by_parts(x_q, x_s, weight_q, weight_scale, bias, out_dtype, split):
    """What split-K must give, built from the tiled kernel: each split's K range multiplied on its own
    (float32 output: the unrounded sum), the splits added in order, then the bias, one rounding."""
    from quantkit.kernels.tiling import split_plan

    k_iters, splits = split_plan(x_q.shape[1], 128, split)
    acc = None
    for s in range(splits):
        lo, hi = s * k_iters, min((s + 1) * k_iters, x_s.shape[1])  # K blocks of this split
        part = fk.gemm(x_q[:, lo * 128:hi * 128].contiguous(), x_s[:, lo:hi].contiguous(),
                       weight_q[:, lo * 128:hi * 128].contiguous(), weight_scale[:, lo:hi].contiguous(), None,
                       torch.float32, config=TILED)
        acc = part if acc is None else acc + part
    if bias is not None:
        acc = acc + bias.float()
    return acc.to(out_dtype), splits


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("mnk", [(128, 4096, 4096), (77, 384, 256), (1000, 4000, 4224), (333, 4096, 4000),
                                 (300, 1001, 512), (128, 4096, 14336)])
def test_split_k_is_the_tiled_gemm_on_each_range_added_in_order_gpu(out_dtype, mnk):
    """Split-K 2 and 4 (4224 = 33 blocks: splits of 17 + 16 and 9 + 9 + 9 + 6; K = 256: two splits of one
    block either way; K = 4000: a last block of 32 columns), through ``gemm`` and ``linear``, with and
    without a bias and PDL: bit for bit the per-range sums added in split order."""
    m, n, k = mnk
    torch.manual_seed(m + n + k + 1)
    x, _, weight_q, weight_scale, bias = make_problem(m, n, k, out_dtype, True, "cuda")
    x_q, x_s = fk.quantize_act(x)
    for split in (2, 4):
        for pdl in (False, True):
            cfg = fk._gluon(128, 64, 8, 6, pdl=pdl, split_k=split)
            for b in (None, bias):
                want, splits = _split_k_by_parts(x_q, x_s, weight_q, weight_scale, b, out_dtype, split)
                assert splits > 1
                y = fk.gemm(x_q, x_s, weight_q, weight_scale, b, out_dtype, config=cfg)
                assert torch.equal(y, want), f"gemm {mnk} split {split} pdl={pdl} bias={b is not None}"
            y = fk.linear(x, weight_q, weight_scale, bias, config=cfg)  # (x's own codes: those of quantize_act)
            assert torch.equal(y, want), f"linear {mnk} split {split} pdl={pdl}"
    if out_dtype != torch.float32:
        check_linear(x, weight_q, weight_scale, bias, f"split-K {mnk} {out_dtype}",
                     config=fk._gluon(128, 64, 8, 6, pdl=True, split_k=2))


@pytest.mark.gpu
@needs_sm90
def test_split_k_in_a_cuda_graph_and_a_launch_plan_gpu():
    """Quantization, split GEMM and reduction chained by PDL: replayed from a CUDA graph and from a
    launch plan, the same outputs as the call."""
    from quantkit.kernels.plan import planned

    x, _, weight_q, weight_scale, bias = make_problem(128, 4096, 4096, torch.bfloat16, True, "cuda")
    cfg = fk._gluon(128, 64, 8, 6, pdl=True, split_k=2)
    want = fk.linear(x, weight_q, weight_scale, bias, config=cfg)
    assert_graph_replays_like(lambda t: fk.linear(t, weight_q, weight_scale, bias, config=cfg), x.clone(),
                              lambda t: fk.linear(t, weight_q, weight_scale, bias, config=cfg))
    run = planned(lambda t: fk.linear(t, weight_q, weight_scale, bias, config=cfg))
    for _ in range(3):
        assert torch.equal(run(x), want)
