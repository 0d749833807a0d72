"""The Gluon weight-only GEMM for sm_90 (quantkit.kernels.wo_gemm_sm90).

Gluon kernels do not run in Triton's interpreter, so on the CPU every candidate config is compiled for
sm_90 with the ptxas that ships with triton (no spills, shared memory within the 227 KB an H100 CTA
may have, and the loop really overlaps: asynchronous wgmma, waited with one group outstanding, TMA
loads). On the GPU: the benchmark shapes are covered by the int8 weight-only tests' every-candidate
test; here odd shapes (M, N and K edges), fp16, a bias, half-precision scales, strided x rows, and a
CUDA graph — against the float64 formula within the float32 bound.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from quantkit.reference.int8 import quantize_weight_int8_per_channel
from tests.kernels.test_int8_weight_only import _assert_within, _fp32_bound, _sm90_tools

_SMEM_LIMIT = 232448  # bytes of shared memory one CTA may use on sm_90


def _candidates():
    from quantkit.kernels import int8_weight_only as k

    seen = []
    for m in (1024, 4096):
        for n, kk in ((4096, 4096), (14336, 4096), (4096, 14336)):
            for c in k.candidate_configs(m, n, kk):
                if c["kernel"] == "tma_wgmma" and c not in seen:
                    seen.append(c)
    return seen


def _compile_main() -> None:
    """Run in a subprocess without TRITON_INTERPRET: compile each candidate (bf16, no bias) and the
    first with fp16 and a bias for sm_90; print one line each and 'ok' when all pass."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    from quantkit.kernels import wo_gemm_sm90 as g

    jobs = [(c, torch.bfloat16, False) for c in _candidates()]
    jobs.append((jobs[0][0], torch.float16, True))
    failures = []
    for cfg, dtype, has_bias in jobs:
        bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
        x, w = torch.empty(4096, 4096, dtype=dtype), torch.empty(4096, 4096, dtype=torch.int8)
        x_desc, w_desc = g.descriptors(x, w, bm, bn, bk)
        fn = g._wo_int8_ws_kernel if cfg["WS"] else g._wo_int8_kernel
        out = "*bf16" if dtype == torch.bfloat16 else "*fp16"
        sig = dict(x_desc=mangle_type(x_desc), w_desc=mangle_type(w_desc), scale_ptr="*fp32", bias_ptr=out,
                   y_ptr=out, M="i32", N="i32", K="i32", stride_ym="i32", HAS_BIAS="constexpr", GROUP_M="constexpr",
                   STAGES="constexpr", INSTR_N="constexpr", num_warps="constexpr")
        consts = dict(HAS_BIAS=has_bias, GROUP_M=cfg["GROUP_M"], STAGES=cfg["num_stages"], INSTR_N=min(bn, 256),
                      num_warps=cfg["num_warps"])
        attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]]
                 for a in ("scale_ptr", "y_ptr", "N", "K", "stride_ym")}
        kernel = triton.compile(GluonASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                                options=dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"]))
        ptx = kernel.asm["ptx"]
        info, _ = _sm90_tools(kernel)
        spills = int(re.search(r"(\d+) bytes spill stores", info).group(1))
        smem = kernel.metadata.shared
        overlap = ("wgmma.mma_async" in ptx and "wgmma.wait_group.sync.aligned 1;" in ptx
                   and "cp.async.bulk.tensor" in ptx)
        what = f"{cfg} {str(dtype)[6:]} bias={has_bias}"
        print(f"{what}: spills={spills} smem={smem} overlap={overlap}")
        if spills or smem > _SMEM_LIMIT or not overlap or "C7515" in info:
            failures.append(what)
    print("\n".join(failures) if failures else "ok")
    sys.exit(1 if failures else 0)


def test_candidates_are_offered_for_large_m_only():
    from quantkit.kernels import int8_weight_only as k

    assert _candidates(), "no Gluon config among the large-M candidates"
    for m in (1, 16, 128):
        assert all(c["kernel"] != "tma_wgmma" for c in k.candidate_configs(m, 4096, 4096))


def test_falls_back_where_it_cannot_run(kernel_device):
    """Off sm_90 (the interpreter here, or another GPU), a tma_wgmma config runs the mma_ss kernel."""
    from quantkit.kernels import int8_weight_only as k

    if kernel_device == "cuda" and torch.cuda.get_device_capability()[0] == 9:
        pytest.skip("sm_90 runs the Gluon kernel itself")
    w = torch.randn(40, 64, device=kernel_device) * 0.02
    weight_q, weight_scale = quantize_weight_int8_per_channel(w)
    x = torch.randn(20, 64, device=kernel_device).to(torch.bfloat16)
    y = k.linear(x, weight_q, weight_scale, config=_candidates()[0])
    exact, bound = _fp32_bound(x, weight_q, weight_scale, None, torch.bfloat16)
    _assert_within(y, exact, bound, "fallback")


@pytest.mark.slow
def test_every_candidate_compiles_for_sm90():
    try:
        import triton
        import triton.backends.nvidia  # noqa: F401
    except ImportError:
        pytest.skip("triton has no NVIDIA backend here")
    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    if not all(os.path.exists(os.path.join(bin_dir, t)) for t in ("ptxas", "nvdisasm")):
        pytest.skip("triton's ptxas / nvdisasm are not available")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {key: v for key, v in os.environ.items() if key != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    code = "from tests.kernels.test_wo_gemm_sm90 import _compile_main; _compile_main()"
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-4000:] + proc.stderr[-4000:]


# --------------------------------------------------------------------------- GPU
def _sm90():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs an sm_90 GPU")


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,dtype,bias,scale_dtype", [
    (300, 1000, 1040, torch.bfloat16, True, torch.float32),   # every edge: M, N and K tails
    (257, 384, 4096, torch.float16, False, torch.bfloat16),   # fp16, half-precision scales
    (1030, 4096, 128, torch.bfloat16, False, torch.float32),  # K shorter than the ring
    (4096, 136, 14336, torch.float16, True, torch.float16),   # one tile column, long K
])
def test_gpu_edges_against_the_float32_bound(M, N, K, dtype, bias, scale_dtype):
    _sm90()
    from quantkit.kernels import int8_weight_only as k
    from quantkit.kernels import wo_gemm_sm90 as g

    torch.manual_seed(0)
    weight_q, weight_scale = quantize_weight_int8_per_channel(torch.randn(N, K, device="cuda") * 0.02)
    weight_scale = weight_scale.to(scale_dtype)
    x = torch.randn(M, K, device="cuda").to(dtype)
    b = (torch.randn(N, device="cuda") * 0.1).to(dtype) if bias else None
    exact, bound = _fp32_bound(x, weight_q, weight_scale.float(), b, dtype)
    for cfg in _candidates():
        assert g.usable(x, weight_q)
        y = k.linear(x, weight_q, weight_scale, b, config=cfg)
        _assert_within(y, exact, bound, f"M={M} N={N} K={K} {dtype} {cfg}")
        again = k.linear(x, weight_q, weight_scale, b, config=cfg)
        assert torch.equal(y, again), f"{cfg}: outputs change between runs (a race)"


@pytest.mark.gpu
def test_gpu_strided_rows_and_cuda_graph():
    _sm90()
    from quantkit.kernels import int8_weight_only as k

    torch.manual_seed(1)
    weight_q, weight_scale = quantize_weight_int8_per_channel(torch.randn(512, 1024, device="cuda") * 0.02)
    base = torch.randn(600, 1032, device="cuda").to(torch.bfloat16)
    x = base[:, 8:]  # row stride 1032 elements: 16-byte aligned rows, not contiguous
    exact, bound = _fp32_bound(x, weight_q, weight_scale, None, torch.bfloat16)
    for cfg in _candidates():  # the plain and the warp-specialized kernel
        y = k.linear(x, weight_q, weight_scale, config=cfg)
        _assert_within(y, exact, bound, f"strided x rows {cfg}")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y_graph = k.linear(x, weight_q, weight_scale, config=cfg)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y_graph, y), cfg
