"""int8 weight-only (A16W8) Triton kernels against quantkit.reference.int8.

On the CPU the kernels run in Triton's interpreter (small, odd shapes); the ``gpu`` tests run the
Llama layer shapes, every shipped tuned config, torch.compile and CUDA-graph capture.

Tolerances are not guesses: both the kernel and the reference sum K float32 products in some order,
so each differs from the exact (float64) value of the same formula by at most the float32
summation bound (K + 2)·2⁻²⁴·Σ|x·Wq·s| plus half an ulp of the output dtype. Integer-valued
inputs make every partial sum exact, so there the outputs must match the reference bit for bit.
"""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from quantkit.reference.int8 import int8_weight_only_linear, quantize_weight_int8_per_channel
from tests.helpers import rel_error

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_HALF_ULP = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}


def _interpreted() -> bool:
    return _module()._INTERPRETED


def _out_rounding(dtype) -> float:
    """Relative rounding of the final cast. Triton's interpreter (3.6) casts float32 -> bfloat16 by
    truncation (the GPU rounds to nearest even), so there a whole ulp is possible."""
    if dtype == torch.bfloat16 and _interpreted():
        return 2.0 ** -7
    return _HALF_ULP[dtype]


def _assert_same_as_reference(y, ref, ref_fp32, what):
    """Bit-exact against the reference; under the interpreter a bf16 element may instead be the
    truncation of the same float32 value (its cast bug) — nothing else is excused."""
    differ = y != ref
    if y.dtype == torch.bfloat16 and _interpreted():
        truncated = (ref_fp32.view(torch.int32) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)
        differ &= y != truncated
        assert (y != ref).float().mean().item() < 0.75, f"{what}: suspiciously many truncations"
    assert not differ.any(), f"{what}: {int(differ.sum())} elements differ from the reference; first at " \
                             f"{differ.nonzero()[:3].tolist()}"


def _module():
    import quantkit.kernels.int8_weight_only as k

    return k


def _gemv(bn, bk, warps=4, stages=1, split=1):
    return {"kernel": "gemv", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": warps,
            "num_stages": stages}


def _mma(bn, bm, bk, warps=4, stages=2, split=1, group=8):
    return {"kernel": "mma", "BLOCK_N": bn, "BLOCK_M": bm, "BLOCK_K": bk, "SPLIT_K": split, "GROUP_N": group,
            "num_warps": warps, "num_stages": stages}


# (name, M, N, K, config): every kernel variant and branch (split or not, masked K tail or not,
# several M and N tiles with the grouped order, rows not 16-byte aligned), at shapes that are not
# multiples of the tiles.
VARIANTS = [
    ("gemv", 1, 123, 123, _gemv(16, 64)),
    ("gemv-splitk", 1, 67, 300, _gemv(8, 32, split=3)),
    ("gemv-pipelined-rows", 3, 40, 128, _gemv(16, 64, stages=2)),
    ("mma-small", 5, 123, 144, _mma(64, 16, 32)),
    ("mma-small-splitk", 16, 130, 240, _mma(64, 16, 32, split=2)),
    ("mma-tiles-grouped", 70, 130, 96, _mma(64, 32, 32, split=1, group=2)),
    ("mma-large-splitk", 33, 64, 256, _mma(64, 64, 64, warps=8, split=4)),
    ("mma-unaligned-k", 9, 50, 100, _mma(64, 16, 32)),  # K % 16 != 0: the launcher's safe tile
]
VARIANT_IDS = [v[0] for v in VARIANTS]


def _exact(x, weight_q, weight_scale, bias):
    """The reference formula in float64 (no rounding except the inputs')."""
    y = (x.double() @ weight_q.double().t()) * weight_scale.double().reshape(1, -1)
    if bias is not None:
        y = y + bias.double()
    return y


def _assert_within_fp32_bound(y, x, weight_q, weight_scale, bias, what, extra_rel=0.0):
    """|y - exact| <= rounding(out)·|exact| + ((K+2)·2⁻²⁴ + extra_rel)·(Σ|x·Wq·s| + |bias|)."""
    K = x.shape[1]
    exact = _exact(x, weight_q, weight_scale, bias)
    mag = (x.double().abs() @ weight_q.double().abs().t()) * weight_scale.double().abs().reshape(1, -1)
    if bias is not None:
        mag = mag + bias.double().abs()
    bound = _out_rounding(y.dtype) * exact.abs() + ((K + 2) * 2.0 ** -24 + extra_rel) * mag + 1e-30
    err = (y.double() - exact).abs()
    bad = err > bound
    assert not torch.isnan(y).any(), f"{what}: NaN in output"
    if bad.any():
        idx = bad.nonzero()[:5]
        rows = [f"  at {tuple(i.tolist())}: got {y[tuple(i)].item():.7g}, exact {exact[tuple(i)].item():.7g}, "
                f"bound {bound[tuple(i)].item():.3g}" for i in idx]
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} outside the float32 bound:\n" + "\n".join(rows))


def _layer_inputs(M, N, K, dtype, device, bias=False, scale_dtype=torch.float32):
    w = (torch.randn(N, K) * 0.02).to(dtype)
    weight_q, weight_scale = quantize_weight_int8_per_channel(w)
    x = torch.randn(M, K).to(dtype)
    b = (torch.randn(N) * 0.1).to(dtype) if bias else None
    to = lambda t: None if t is None else t.to(device)  # noqa: E731
    return to(x), to(weight_q), to(weight_scale.to(scale_dtype)), to(b)


# --------------------------------------------------------------------------- CPU (interpreter) + GPU
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name,M,N,K,config", VARIANTS, ids=VARIANT_IDS)
def test_integer_inputs_match_reference_bit_for_bit(kernel_device, name, M, N, K, config, dtype):
    """Integer x, every int8 code (-128 included), power-of-two scales, integer bias: all partial
    sums are exact in float32, so any dequantization or indexing slip shows as a mismatch."""
    k = _module()
    weight_q = torch.randint(-128, 128, (N, K), dtype=torch.int8)
    weight_q.view(-1)[:256] = torch.arange(-128, 128).to(torch.int8)
    weight_scale = torch.exp2(torch.randint(-9, -3, (N,)).float())
    x = torch.randint(-3, 4, (M, K)).to(dtype)
    bias = torch.randint(-4, 5, (N,)).to(dtype)
    x, weight_q, weight_scale, bias = (t.to(kernel_device) for t in (x, weight_q, weight_scale, bias))
    y = k.linear(x, weight_q, weight_scale, bias, config=config)
    ref = int8_weight_only_linear(x, weight_q, weight_scale, bias)
    ref_fp32 = int8_weight_only_linear(x.float(), weight_q, weight_scale, bias.float())  # exact here
    assert y.dtype == dtype and y.shape == (M, N)
    _assert_same_as_reference(y, ref, ref_fp32, name)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name,M,N,K,config", VARIANTS, ids=VARIANT_IDS)
def test_random_inputs_within_fp32_bound(kernel_device, name, M, N, K, config, dtype):
    k = _module()
    use_bias = VARIANT_IDS.index(name) % 2 == 0  # half of the variants with a bias
    x, weight_q, weight_scale, bias = _layer_inputs(M, N, K, dtype, kernel_device, bias=use_bias)
    y = k.linear(x, weight_q, weight_scale, bias, config=config)
    ref = int8_weight_only_linear(x, weight_q, weight_scale, bias)
    _assert_within_fp32_bound(y, x, weight_q, weight_scale, bias, f"{name} kernel")
    _assert_within_fp32_bound(ref, x, weight_q, weight_scale, bias, f"{name} reference (sanity)")


@pytest.mark.parametrize("M", [1, 3, 80])
def test_default_config_dispatch(kernel_device, M):
    """config=None: GEMV at M = 1, tensor-core kernel otherwise; N, K off the tiles."""
    k = _module()
    N, K = 96, 200
    assert k.default_config(M, N, K)["kernel"] == ("gemv" if M == 1 else "mma")
    x, weight_q, weight_scale, bias = _layer_inputs(M, N, K, torch.bfloat16, kernel_device, bias=True)
    y = k.linear(x, weight_q, weight_scale, bias)
    _assert_within_fp32_bound(y, x, weight_q, weight_scale, bias, f"default config at M={M}")


@pytest.mark.parametrize("scale_dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("config", [_gemv(16, 64), _mma(64, 16, 32, split=2)], ids=["gemv", "mma"])
def test_half_precision_scales_are_widened(kernel_device, scale_dtype, config):
    """bf16/fp16 scales (other tools' checkpoints) give exactly the float32-scale result."""
    k = _module()
    M = 1 if config["kernel"] == "gemv" else 6
    x, weight_q, scale16, _ = _layer_inputs(M, 50, 130, torch.bfloat16, kernel_device, scale_dtype=scale_dtype)
    y16 = k.linear(x, weight_q, scale16, config=config)
    y32 = k.linear(x, weight_q, scale16.float(), config=config)
    assert torch.equal(y16, y32)
    _assert_within_fp32_bound(y16, x, weight_q, scale16.float(), None, "half-precision scale")


def test_strided_activation_rows_and_column_scale(kernel_device):
    """x rows with a stride > K (a slice of a wider tensor) and a [N, 1] scale are taken as they are."""
    k = _module()
    M, N, K = 4, 37, 90
    wide = torch.randn(M, K + 22, dtype=torch.float16, device=kernel_device)
    x = wide[:, 5:5 + K]
    assert x.stride(0) == K + 22
    _, weight_q, weight_scale, _ = _layer_inputs(M, N, K, torch.float16, kernel_device)
    for config in (_gemv(8, 32), _mma(64, 16, 32)):
        y = k.linear(x, weight_q, weight_scale.reshape(N, 1), config=config)
        _assert_within_fp32_bound(y, x, weight_q, weight_scale, None, f"strided x, {config['kernel']}")


def test_launcher_rejects_bad_inputs(kernel_device):
    k = _module()
    x, weight_q, weight_scale, _ = _layer_inputs(2, 16, 32, torch.bfloat16, kernel_device)
    with pytest.raises(ValueError, match="weight_q must be contiguous"):
        k.linear(x, weight_q.t().contiguous().t(), weight_scale)
    with pytest.raises(TypeError, match="weight_q"):
        k.linear(x, weight_q.to(torch.int16), weight_scale)
    with pytest.raises(ValueError, match="K=32"):
        k.linear(x[:, :31], weight_q, weight_scale)
    with pytest.raises(ValueError, match="weight_scale"):
        k.linear(x, weight_q, weight_scale[:15])
    with pytest.raises(TypeError, match="weight_scale"):
        k.linear(x, weight_q, weight_scale.double())
    with pytest.raises(ValueError, match="bias"):
        k.linear(x, weight_q, weight_scale, torch.zeros(17, dtype=torch.bfloat16, device=kernel_device))
    with pytest.raises(ValueError, match="2-D"):
        k.linear(x[None], weight_q, weight_scale)
    with pytest.raises(TypeError, match="x dtype"):
        k.linear(x.to(torch.int32), weight_q, weight_scale)
    with pytest.raises(ValueError, match="contiguous last dimension"):
        k.linear(torch.randn(32, 2, device=kernel_device, dtype=torch.bfloat16).t(), weight_q, weight_scale)
    with pytest.raises(ValueError, match="config"):
        k.linear(x, weight_q, weight_scale, config={"kernel": "nope"})


def test_config_space_fits_the_sweep_budget():
    """≤ 8 candidates per problem, every default among them, and few compilations over the 15 cells
    (SPLIT_K is a runtime argument: configs that differ only in it share one compilation)."""
    k = _module()
    from quantkit.kernels.tuning import BENCH_M, LLAMA_SHAPES

    dicts, compiled = set(), set()
    for n, kk in LLAMA_SHAPES:
        for m in BENCH_M:
            cands = k.candidate_configs(m, n, kk)
            assert 1 <= len(cands) <= 8
            assert k.default_config(m, n, kk) in cands
            for c in cands:
                dicts.add(json.dumps(c, sort_keys=True))
                compiled.add(json.dumps({**c, "SPLIT_K": c["SPLIT_K"] > 1}, sort_keys=True))
    assert len(compiled) <= 24, sorted(compiled)
    assert len(dicts) <= 40


@pytest.mark.parametrize("K,block_k,split", [(4096, 512, 3), (14336, 128, 8), (123, 32, 3), (100, 512, 4), (96, 32, 7)])
def test_split_plan_divides_the_k_loop_evenly(K, block_k, split):
    k = _module()
    iters, splits = k._split_plan(K, block_k, split)
    total = -(-K // block_k)
    assert 1 <= splits <= split and iters * splits == total


# --------------------------------------------------------------------------- GPU only
LLAMA = [(4096, 4096), (14336, 4096), (4096, 14336)]


@pytest.fixture(scope="module")
def llama_weights():
    """Per shape: the bf16 weight ~ N(0, 0.02²) and its quantization (made once, on the GPU)."""
    out = {}
    gen = torch.Generator(device="cuda").manual_seed(0)
    for n, kk in LLAMA:
        w = (torch.randn(n, kk, device="cuda", generator=gen) * 0.02).to(torch.bfloat16)
        out[(n, kk)] = (w,) + quantize_weight_int8_per_channel(w)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 16, 128, 1024])
@pytest.mark.parametrize("N,K", LLAMA, ids=[f"{n}x{kk}" for n, kk in LLAMA])
def test_gpu_llama_shapes(llama_weights, N, K, M):
    k = _module()
    w, weight_q, weight_scale = llama_weights[(N, K)]
    x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    y = k.linear(x, weight_q, weight_scale)
    ref = int8_weight_only_linear(x, weight_q, weight_scale)
    _assert_within_fp32_bound(y, x, weight_q, weight_scale, None, f"M={M} {N}x{K}")
    assert rel_error(y, ref) < 2e-3  # both round the same float32 values to bf16
    truth = F.linear(x.double(), w.double())
    assert rel_error(y, truth) <= rel_error(ref, truth) * 1.02 + 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("M", [1, 16, 128])
def test_gpu_other_activation_dtypes(llama_weights, dtype, M):
    """fp16 through the fp16 paths; fp32 through the exact-float32 GEMV and the tf32x3 tensor-core
    kernel, whose extra error is ~2⁻²¹ per product: the 2⁻¹⁹ allowance below is 4x that, while plain
    tf32 (2⁻¹¹ per product) would exceed it by far."""
    k = _module()
    _, weight_q, weight_scale = llama_weights[(4096, 4096)]
    x = torch.randn(M, 4096, device="cuda").to(dtype)
    bias = (torch.randn(4096, device="cuda") * 0.1).to(dtype)
    y = k.linear(x, weight_q, weight_scale, bias)
    extra = 2.0 ** -19 if dtype == torch.float32 else 0.0
    _assert_within_fp32_bound(y, x, weight_q, weight_scale, bias, f"{dtype} M={M}", extra_rel=extra)
    if dtype == torch.float32:
        assert rel_error(y, _exact(x, weight_q, weight_scale, bias)) < 1e-5


@pytest.mark.gpu
def test_gpu_every_shipped_config_is_correct():
    """Each config of the shipped table for this GPU, on its own problem (M = the bucket)."""
    k = _module()
    from quantkit.kernels import tuning

    table = tuning._shipped(k.FAMILY)
    problems = [(tuple(int(v) for v in key.split(",")), cfg) for key, cfg in table.items()]
    if not problems:  # nothing shipped yet: at least every default of the benchmark cells
        problems = [((m, n, kk), k.default_config(m, n, kk)) for n, kk in LLAMA for m in tuning.BENCH_M]
    weights: dict = {}
    for (m, n, kk), cfg in problems:
        if (n, kk) not in weights:
            weights[(n, kk)] = quantize_weight_int8_per_channel(torch.randn(n, kk, device="cuda") * 0.02)
        weight_q, weight_scale = weights[(n, kk)]
        x = torch.randn(m, kk, device="cuda").to(torch.bfloat16)
        y = k.linear(x, weight_q, weight_scale, config=cfg)
        _assert_within_fp32_bound(y, x, weight_q, weight_scale, None, f"M={m} {n}x{kk} {cfg}")


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("M", [1, 16, 128, 1024])
def test_gpu_every_candidate_config_is_correct(llama_weights, M):
    """Whatever the offline sweep picks is correct: every candidate of the 4096x4096 cells (the
    M = 4096 list is the M = 1024 one). Mostly compilation time (~20 variants), with the same
    specializations as the sweep's, which then reuses them from Triton's cache."""
    k = _module()
    _, weight_q, weight_scale = llama_weights[(4096, 4096)]
    x = torch.randn(M, 4096, device="cuda").to(torch.bfloat16)
    for cfg in k.candidate_configs(M, 4096, 4096):
        y = k.linear(x, weight_q, weight_scale, config=cfg)
        _assert_within_fp32_bound(y, x, weight_q, weight_scale, None, f"M={M} {cfg}")


def _small_model():
    """Shapes chosen so that the default configs take split-K at M = 1, 16 and 300 (workspace
    allocated inside the captured graph); ReLU keeps compiled and eager outputs bit-identical."""
    from quantkit import quantize_

    model = torch.nn.Sequential(torch.nn.Linear(4096, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 1000)).to("cuda", torch.bfloat16)
    quantize_(model, "int8-weight-only")
    return model.eval()


@pytest.mark.gpu
def test_gpu_torch_compile_fullgraph_matches_eager():
    model = _small_model()
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        for M in (1, 16, 100):
            x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
            torch.testing.assert_close(compiled(x), model(x), atol=0, rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 16, 300])
def test_gpu_cuda_graph_capture_matches_eager(M):
    model = _small_model()
    static_x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: compile kernels and resolve configs outside capture
            for _ in range(2):
                model(static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = model(static_x)
        for _ in range(2):
            static_x.copy_(torch.randn_like(static_x))
            graph.replay()
            torch.testing.assert_close(static_y, model(static_x), atol=0, rtol=0)
