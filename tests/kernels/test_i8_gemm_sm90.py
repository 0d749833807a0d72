"""The Gluon int8 × int8 GEMM of int8-dynamic at large M (quantkit.kernels.i8_gemm_sm90).

Gluon kernels do not run in Triton's interpreter. On the CPU every config of the family that uses it
(and fp16 / fp32 outputs, a bias, PDL) is compiled for sm_90 with the ptxas that ships with triton: no
spills, the operand ring within an H100's shared memory, no serialized wgmmas (ptxas C7515), and the
point of the kernel — a wgmma kept in flight across K steps (``wgmma.wait_group 1`` in the loop). On
the GPU its outputs are compared bit for bit with the Triton TMA kernel's (the same epilogue in the same
order on the same int32 sums) at odd M, N and K, every output dtype, with and without a bias, through
the layer's workspace path, with PDL and replayed from a CUDA graph (the warp-specialized persistent
variant too); a K the kernel cannot take falls back and still matches the reference.
"""
import re

import pytest
import torch

from quantkit.kernels import int8_dynamic as ik
from tests.helpers import assert_graph_replays_like
from tests.kernels.test_int8_dynamic import assert_scaled_close, make_problem, reference_linear32
from tests.kernels.test_int8_weight_only import run_compile_jobs, run_sm90_check


def _gluon_configs():
    seen, out = set(), []
    for m in (128, 1024, 4096):
        for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
            for c in ik.candidate_configs(m, n, k) + [ik.default_config(m, n, k)]:
                key = tuple(sorted(c.items()))
                if c.get("mode") in ("gluon", "gluon_ws") and key not in seen:
                    seen.add(key)
                    out.append(c)
    return out


def _compile(cfg, out_dtype="bf16", bias=False):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from quantkit.kernels import i8_gemm_sm90 as g

    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    ws = cfg["mode"] == "gluon_ws"
    fn = g._i8_gemm_ws_kernel if ws else g._i8_gemm_kernel
    int8 = g.gl.int8
    sig = dict(a_desc=f"tensordesc<i8[{bm}, {bk}],{g._smem_layout(bm, bk, int8)}>",
               b_desc=f"tensordesc<i8[{bn}, {bk}],{g._smem_layout(bn, bk, int8)}>", a_scale_ptr="*i8", a_scale_off="i32",
               b_scale_ptr="*fp32", bias_ptr=f"*{out_dtype}", c_ptr=f"*{out_dtype}", part_ptr="*i8", part_off="i32",
               M="i32", N="i32", K="i32", stride_cm="i32", K_ITERS="i32")
    if ws:
        epi_tma = cfg.get("EPI") == "tma"
        c_gl = {"bf16": g.gl.bfloat16, "fp16": g.gl.float16, "fp32": g.gl.float32}[out_dtype]
        sig["c_desc"] = (f"tensordesc<{out_dtype}[{bm // 2}, {bn}],{g._smem_layout(bm // 2, bn, c_gl)}>" if epi_tma
                         else sig["a_desc"])
    warps = 4 if ws else cfg["num_warps"]  # (the warp-specialized kernel: one consumer warpgroup + workers)
    consts = dict(HAS_BIAS=bias, GROUP_M=cfg["GROUP_M"], STAGES=cfg["num_stages"], WAIT_PRIOR=cfg["pdl"],
                  num_warps=warps)
    if not ws:
        consts["SPLIT_K"] = cfg["SPLIT_K"]
    if ws:
        consts["CONSUMER_REGS"] = g._WS_CONSUMER_REGS
        consts["EPI_TMA"] = epi_tma
    sig.update({k: "constexpr" for k in consts})
    sig = {name: sig[name] for name in fn.arg_names if name in sig}  # (in the kernel's argument order)
    return triton.compile(GluonASTSource(fn, sig, consts), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=warps, enable_fp_fusion=False))


def _check_main() -> None:
    """Compile every Gluon config (bf16; the first also fp16 + bias and fp32); print a line each, 'ok' last."""
    configs = _gluon_configs()
    ws = next(c for c in configs if c["mode"] == "gluon_ws")
    jobs = [(c, "bf16", False) for c in configs] + [(configs[0], "fp16", True), (configs[0], "fp32", True),
                                                    (ws, "fp16", True), (ws, "fp32", True)]

    def extra(kernel, info, sass):
        waits = sorted(set(re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", kernel.asm["ptx"])))
        return f"waits={waits}", "C7515" not in info and "1" in waits

    run_compile_jobs(jobs, _compile, extra)


def test_candidates_compile_for_sm90():
    assert _gluon_configs(), "no Gluon config among the candidates"
    run_sm90_check("from tests.kernels.test_i8_gemm_sm90 import _check_main; _check_main()")


def test_default_is_the_gluon_gemm_at_large_m():
    assert ik.default_config(1024, 4096, 4096)["mode"] == "gluon"


def test_tma_epilogue_config_checks():
    ik._check_config(ik._two_pass(128, 256, 128, 8, 3, mode="gluon_ws", epi="tma"))
    with pytest.raises(ValueError, match="EPI"):
        ik._check_config(ik._two_pass(128, 256, 128, 8, 3, mode="gluon", epi="tma"))
    with pytest.raises(ValueError, match="EPI"):
        ik._check_config(ik._two_pass(128, 256, 128, 8, 3, mode="gluon_ws", epi="smem"))


# --------------------------------------------------------------------------- GPU
def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


needs_sm90 = pytest.mark.skipif(not _sm90(), reason="the Gluon GEMM needs an sm_90 GPU")


# The warp-specialized kernel: row stores, and TMA stores (two or more tiles a program at the larger shapes,
# so the store of one tile overlaps the next one's K loop and the buffer is reused)
_WS_CONFIGS = [ik._two_pass(128, 128, 128, 8, 5, mode="gluon_ws"),
               ik._two_pass(128, 128, 128, 8, 5, mode="gluon_ws", epi="tma"),
               ik._two_pass(128, 256, 128, 8, 3, mode="gluon_ws", epi="tma"),
               ik._two_pass(256, 128, 128, 8, 3, mode="gluon_ws", epi="tma")]


def _split(bm, bn, split, pdl=False):
    return ik._two_pass(bm, bn, 128, 8 if bm == 128 else 4, 4, mode="gluon", pdl=pdl, split_k=split)


def _both(bm, bn, pdl=False):
    return (ik._two_pass(bm, bn, 128, 8, 4, mode="gluon", pdl=pdl),
            ik._two_pass(bm, bn, 128, 8, 4, mode="tma", pdl=pdl))


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("mnk", [(1000, 1000, 4096), (257, 4000, 784), (4096, 4096, 4096), (300, 520, 14336),
                                 (300, 1001, 512)])
def test_bit_identical_to_the_triton_gemm_gpu(out_dtype, mnk):
    """(N = 1001: rows not 16-byte aligned, so the TMA-store configs store by rows.)"""
    m, n, k = mnk
    torch.manual_seed(m + n + k)
    x, weight_q, weight_scale, bias = make_problem(m, n, k, out_dtype, True, "cuda")
    x_q, x_s = ik.quantize_act(x)
    # (the warp-specialized persistent kernel against the Triton TMA GEMM at 128 x 128, the plain Gluon one
    # against the Triton TMA GEMM of its own tile)
    pairs = [(ws, _both(128, 128)[1]) for ws in _WS_CONFIGS] + [_both(128, 256), _both(256, 128)]
    # split-K (int32 partials, exact in any split): the same outputs as one K range; 8 splits of K = 512 or
    # 784 leave 4 splits of one step or a last split of one step
    pairs += [(_split(128, 128, 4), _both(128, 128)[1]), (_split(64, 64, 8), _both(64, 64)[1])]
    for cfg, tma in pairs:
        for b in (None, bias):
            y = ik.gemm(x_q, x_s, weight_q, weight_scale, b, out_dtype, config=cfg)
            assert torch.equal(y, ik.gemm(x_q, x_s, weight_q, weight_scale, b, out_dtype, config=tma)), \
                f"gemm {mnk} {cfg} {out_dtype} bias={b is not None}"
        # the layer: codes and row scales in the workspace behind the output (a flat buffer)
        y = ik.linear(x, weight_q, weight_scale, bias, config=cfg)
        assert torch.equal(y, ik.linear(x, weight_q, weight_scale, bias, config=tma)), f"linear {mnk} {cfg}"
    assert_scaled_close(y, reference_linear32(x, weight_q, weight_scale, bias), f"linear {mnk} {out_dtype}")


@pytest.mark.gpu
@needs_sm90
def test_k_it_cannot_take_falls_back_gpu():
    """K not a multiple of 16 (no TMA): the config still runs, on the pointer kernel."""
    x, weight_q, weight_scale, bias = make_problem(300, 260, 1000, torch.bfloat16, True, "cuda")
    y = ik.linear(x, weight_q, weight_scale, bias, config=_both(128, 256)[0])
    assert_scaled_close(y, reference_linear32(x, weight_q, weight_scale, bias), "K = 1000")


@pytest.mark.gpu
@needs_sm90
def test_pdl_and_cuda_graph_gpu():
    gluon, tma = _both(128, 256, pdl=True)
    x, weight_q, weight_scale, bias = make_problem(1024, 2048, 4096, torch.bfloat16, True, "cuda")
    assert torch.equal(ik.linear(x, weight_q, weight_scale, bias, config=gluon),
                       ik.linear(x, weight_q, weight_scale, bias, config=tma))
    assert_graph_replays_like(lambda t: ik.linear(t, weight_q, weight_scale, bias, config=gluon), x.clone(),
                              lambda t: ik.linear(t, weight_q, weight_scale, bias, config=tma))
    for epi in ("rows", "tma"):
        ws = ik._two_pass(128, 128, 128, 8, 5, mode="gluon_ws", pdl=True, epi=epi)
        assert_graph_replays_like(lambda t: ik.linear(t, weight_q, weight_scale, bias, config=ws), x.clone(),
                                  lambda t: ik.linear(t, weight_q, weight_scale, bias, config=tma))


@pytest.mark.gpu
@needs_sm90
def test_split_k_with_pdl_cuda_graph_and_launch_plan_gpu():
    """Split-K at M = 128 (quantization, GEMM and reduction chained by PDL): the same outputs as one K
    range, replayed from a CUDA graph and from a launch plan."""
    from quantkit.kernels.plan import planned

    split, tma = _split(128, 128, 4, pdl=True), _both(128, 128)[1]
    x, weight_q, weight_scale, bias = make_problem(128, 4096, 4096, torch.bfloat16, True, "cuda")
    want = ik.linear(x, weight_q, weight_scale, bias, config=tma)
    assert torch.equal(ik.linear(x, weight_q, weight_scale, bias, config=split), want)
    assert_graph_replays_like(lambda t: ik.linear(t, weight_q, weight_scale, bias, config=split), x.clone(),
                              lambda t: ik.linear(t, weight_q, weight_scale, bias, config=tma))
    run = planned(lambda t: ik.linear(t, weight_q, weight_scale, bias, config=split))
    for _ in range(3):
        assert torch.equal(run(x), want)
