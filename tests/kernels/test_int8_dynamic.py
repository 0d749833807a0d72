"""int8 dynamic (W8A8) Triton kernels against quantkit.reference.int8.

On the CPU the kernels run in Triton's interpreter (small, odd shapes); the ``gpu`` tests run them at
the Llama shapes of PERFORMANCE.md, under torch.compile and inside a CUDA graph.

What must match exactly: int8 codes and float32 scales of both quantizers, and the int32 accumulator
(checked through ``gemm`` with unit scales and float32 output, and through the fused kernel with
activations whose scale is exactly 1). Scaled outputs: within the output dtype's rounding of the
float32 reference (one unit in the last place). The interpreter's float32 -> bfloat16 cast truncates
instead of rounding to nearest, which one ulp also covers. (The kernels round exactly like the reference,
so on the GPU the outputs are expected to be bit-identical: scripts/bench_int8_dynamic.py counts it.)
"""
import os

import pytest
import torch
import torch.nn.functional as F

from quantkit.reference import int8 as R
from tests.helpers import rel_error

ik = pytest.importorskip("quantkit.kernels.int8_dynamic")

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
_FRACTION_BITS = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}


def _ulp(ref32: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One unit in the last place of ``dtype`` at the magnitude of ``ref32`` (subnormals included)."""
    _, exp = torch.frexp(ref32.double().abs())
    min_exp = {torch.bfloat16: -125, torch.float16: -13, torch.float32: -125}[dtype]
    return torch.ldexp(torch.ones_like(ref32, dtype=torch.float64),
                       exp.clamp(min=min_exp) - 1 - _FRACTION_BITS[dtype])


def assert_scaled_close(y: torch.Tensor, ref32: torch.Tensor, what: str) -> None:
    """``y`` (out dtype) within one output ulp of the float32 reference ``ref32``."""
    assert y.shape == ref32.shape, f"{what}: shape {tuple(y.shape)} != {tuple(ref32.shape)}"
    assert not torch.isnan(y).any(), f"{what}: NaN in output"
    diff = (y.double() - ref32.double()).abs()
    bad = diff > _ulp(ref32, y.dtype)
    if bad.any():
        idx = bad.nonzero()[:5]
        rows = [f"  at {tuple(i.tolist())}: got {y[tuple(i)].item():.8g}, float32 reference "
                f"{ref32[tuple(i)].item():.8g}" for i in idx]
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} outputs differ from the reference by more "
                             f"than one {y.dtype} ulp; first:\n" + "\n".join(rows))


def reference_linear32(x, weight_q, weight_scale, bias):
    """The reference forward in float32 (before the cast to x.dtype)."""
    x_q, x_scale = R.quantize_act_int8_per_token(x)
    return R.int8_scaled_gemm(x_q, x_scale, weight_q, weight_scale, bias, torch.float32)


def make_problem(m, n, k, dtype, bias, device):
    x = torch.randn(m, k, dtype=dtype, device=device)
    w = torch.randn(n, k, device=device) * 0.02
    weight_q, weight_scale = R.quantize_weight_int8_per_channel(w)
    b = (torch.randn(n, device=device) * 0.02).to(dtype) if bias else None
    return x, weight_q, weight_scale, b


def random_codes(*shape, device):
    return torch.randint(-127, 128, shape, dtype=torch.int8, device=device)


# --------------------------------------------------------------------------- quantizers
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,block_k", [((1, 123), None), ((5, 123), None), ((33, 300), None),
                                           ((7, 300), 64), ((3, 1), None)])
def test_quantize_act_bit_exact(kernel_device, dtype, shape, block_k):
    x = torch.randn(*shape, dtype=dtype, device=kernel_device) * 3
    if shape[0] > 1:
        x[0] = 0  # an all-zero row: scale AMAX_EPS / 127, codes 0
    q, s = ik._quant_rows_launch(x, block_k=block_k) if block_k else ik.quantize_act(x)
    rq, rs = R.quantize_act_int8_per_token(x)
    assert q.dtype == torch.int8 and s.dtype == torch.float32
    assert torch.equal(s, rs), f"scales differ at rows {(s != rs).nonzero().flatten()[:5].tolist()}"
    assert torch.equal(q, rq), f"{int((q != rq).sum())} codes differ"


@pytest.mark.parametrize("dtype", DTYPES)
def test_quantize_ties_round_half_even(kernel_device, dtype):
    # amax 127 makes the scale exactly 1, so x / scale lands on every half-integer: ties go to even.
    x = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -126.5, 3.25, -100.75]], dtype=dtype,
                     device=kernel_device)
    q, s = ik.quantize_act(x)
    assert s.item() == 1.0
    expected = [127, 0, 2, 2, 0, -2, -2, 126, -126, 3, -101]
    assert q.flatten().tolist() == expected
    assert torch.equal(q, R.quantize_act_int8_per_token(x)[0])


def test_quantize_act_strided_rows(kernel_device):
    # Rows of a wider buffer: unit stride along K, row stride 160.
    base = torch.randn(9, 160, dtype=torch.bfloat16, device=kernel_device)
    x = base[:, 10:133]
    q, s = ik.quantize_act(x)
    rq, rs = R.quantize_act_int8_per_token(x)
    assert torch.equal(q, rq) and torch.equal(s, rs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(77, 123), (300, 256)])
def test_quantize_weight_bit_exact(kernel_device, dtype, shape):
    w = (torch.randn(*shape, device=kernel_device) * 0.02).to(dtype)
    q, s = ik.quantize_weight(w)
    rq, rs = R.quantize_weight_int8_per_channel(w)
    assert torch.equal(s, rs) and torch.equal(q, rq)


def test_quantize_weight_non_contiguous(kernel_device):
    w = torch.randn(123, 77, device=kernel_device).t()  # [77, 123] with stride (1, 77)
    q, s = ik.quantize_weight(w)
    rq, rs = R.quantize_weight_int8_per_channel(w)
    assert torch.equal(s, rs) and torch.equal(q, rq)


# --------------------------------------------------------------------------- exact int32 accumulation
GEMM_CONFIGS = [
    ik._two_pass(16, 16, 64, 4, 2),                # K % BLOCK_K != 0 -> masked K loop; mma-size tiles
    ik._two_pass(32, 32, 32, 4, 2, group_m=2),    # several row blocks, grouped order
    ik._two_pass(64, 64, 128, 4, 3),              # wgmma-size tile
    ik._two_pass(16, 32, 64, 4, 2, tma=True),     # TMA descriptors (needs K % 16 == 0)
]


@pytest.mark.parametrize("config", GEMM_CONFIGS, ids=lambda c: f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']}"
                         f"{'-tma' if c['tma'] else ''}")
@pytest.mark.parametrize("mnk", [(1, 77, 123), (5, 123, 123), (33, 70, 256), (70, 45, 96)])
def test_gemm_int32_exact(kernel_device, config, mnk):
    m, n, k = mnk
    x_q, w_q = random_codes(m, k, device=kernel_device), random_codes(n, k, device=kernel_device)
    w_q[0] = 127  # the largest accumulator magnitude the codes allow
    x_q[0] = -127
    ones_m = torch.ones(m, device=kernel_device)
    ones_n = torch.ones(n, device=kernel_device)
    # |acc| <= 127² · 256 < 2^24, so the float32 output holds the int32 accumulator exactly.
    y = ik.gemm(x_q, ones_m, w_q, ones_n, None, torch.float32, config=config)
    expected = R.int8_gemm_int32(x_q, w_q)
    assert torch.equal(y.to(torch.int64), expected.to(torch.int64)), \
        f"{int((y.to(torch.int64) != expected).sum())} accumulators differ"
    assert y[0, 0].item() == -127 * 127 * k


@pytest.mark.parametrize("config,mnk", [
    (ik._fused(1, 16, 64, 4, 1), (3, 40, 150)),
    (ik._fused(1, 16, 1024, 4, 1), (1, 20, 8300)),  # amax over more than one 8192-wide chunk
    (ik._fused(16, 32, 64, 4, 2), (17, 40, 150)),
    (ik._fused(16, 16, 128, 4, 2), (5, 20, 600)),  # amax over two 512-wide chunks
], ids=["gemv", "gemv-long-row", "dot", "dot-long-row"])
def test_fused_int32_exact(kernel_device, config, mnk):
    # Rows with amax 127 and half-integer values: x_scale is exactly 1, so with unit weight scales the
    # float32 output is the int32 accumulator of the round-half-even codes.
    m, n, k = mnk
    # |x| <= 125 except the last column, so a kernel that missed the row's last chunk gets the scale wrong
    x = torch.randint(-250, 251, (m, k), device=kernel_device).float() / 2
    x[:, -1] = 127.0
    x[-1, -1] = -127.0
    w_q = random_codes(n, k, device=kernel_device)
    x_q, x_scale = R.quantize_act_int8_per_token(x)
    assert torch.equal(x_scale, torch.ones_like(x_scale))
    y = ik.linear(x, w_q, torch.ones(n, device=kernel_device), None, config=config)
    assert torch.equal(y.to(torch.int64), R.int8_gemm_int32(x_q, w_q).to(torch.int64))


# --------------------------------------------------------------------------- scaled outputs, every variant
LINEAR_CONFIGS = {
    "fused-gemv": ik._fused(1, 16, 64, 4, 1),
    "fused-dot": ik._fused(16, 32, 64, 4, 2),
    "two-pass-16": ik._two_pass(16, 32, 64, 4, 2),
    "two-pass-64": ik._two_pass(64, 64, 64, 4, 2),
    "two-pass-tma": ik._two_pass(32, 32, 64, 4, 2, tma=True),
}


@pytest.mark.parametrize("variant", list(LINEAR_CONFIGS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mnk,bias", [((1, 77, 123), True), ((5, 123, 123), False), ((33, 300, 256), True)])
def test_linear_matches_reference(kernel_device, variant, dtype, mnk, bias):
    m, n, k = mnk
    if variant == "fused-gemv" and m > 5:
        m = 5  # one program per row: the interpreter is slow with many
    x, weight_q, weight_scale, b = make_problem(m, n, k, dtype, bias, kernel_device)
    y = ik.linear(x, weight_q, weight_scale, b, config=LINEAR_CONFIGS[variant])
    assert y.dtype == dtype and y.shape == (m, n)
    assert_scaled_close(y, reference_linear32(x, weight_q, weight_scale, b), f"{variant} {dtype} {mnk}")


@pytest.mark.parametrize("out_dtype", DTYPES)
def test_gemm_matches_reference(kernel_device, out_dtype):
    x = torch.randn(6, 200, device=kernel_device)
    x_q, x_scale = R.quantize_act_int8_per_token(x)
    weight_q, weight_scale = R.quantize_weight_int8_per_channel(torch.randn(90, 200, device=kernel_device) * 0.02)
    b = torch.randn(90, device=kernel_device, dtype=torch.bfloat16)
    y = ik.gemm(x_q, x_scale, weight_q, weight_scale, b, out_dtype)
    assert y.dtype == out_dtype
    ref32 = R.int8_scaled_gemm(x_q, x_scale, weight_q, weight_scale, b, torch.float32)
    assert_scaled_close(y, ref32, f"gemm -> {out_dtype}")


@pytest.mark.parametrize("m", [1, 7, 40, 130, 300])
def test_default_dispatch_by_m(kernel_device, m):
    """config=None on the CPU takes default_config: each M range's branch runs and is right."""
    n, k = 70, 96
    expected_kind = "fused" if m == 1 else "two_pass"
    assert ik.default_config(m, n, k)["kernel"] == expected_kind
    x, weight_q, weight_scale, b = make_problem(m, n, k, torch.bfloat16, True, kernel_device)
    if kernel_device == "cpu":
        y = ik.linear(x, weight_q, weight_scale, b)
    else:
        y = ik.linear(x, weight_q, weight_scale, b, config=ik.default_config(m, n, k))
    assert_scaled_close(y, reference_linear32(x, weight_q, weight_scale, b), f"default config M={m}")


def test_zero_rows_give_bias(kernel_device):
    x, weight_q, weight_scale, b = make_problem(4, 50, 64, torch.float16, True, kernel_device)
    x[1] = 0
    for config in (LINEAR_CONFIGS["fused-gemv"], LINEAR_CONFIGS["two-pass-16"]):
        y = ik.linear(x, weight_q, weight_scale, b, config=config)
        assert torch.equal(y[1], b)


# --------------------------------------------------------------------------- configs and the sweep's space
def _bench_cells():
    from quantkit.kernels.tuning import BENCH_M, LLAMA_SHAPES

    return [(m, n, k) for n, k in LLAMA_SHAPES for m in BENCH_M]


def test_candidate_space_fits_the_sweep():
    distinct = set()
    for m, n, k in _bench_cells():
        cands = ik.candidate_configs(m, n, k)
        assert 1 <= len(cands) <= 8
        for c in cands:
            ik._check_config(c)
            distinct.add(tuple(sorted(c.items())))
        ik._check_config(ik.default_config(m, n, k))
    assert len(distinct) <= 24, f"{len(distinct)} distinct configs over the benchmark cells"


def test_every_candidate_config_is_correct(kernel_device):
    """Each config the sweep may ship computes the right thing (small problem, odd N)."""
    seen = set()
    configs = []
    for m, n, k in _bench_cells():
        for c in ik.candidate_configs(m, n, k):
            key = tuple(sorted(c.items()))
            if key not in seen:
                seen.add(key)
                configs.append(c)
    x, weight_q, weight_scale, _ = make_problem(3, 45, 256, torch.bfloat16, False, kernel_device)
    ref32 = reference_linear32(x, weight_q, weight_scale, None)
    for c in configs:
        assert_scaled_close(ik.linear(x, weight_q, weight_scale, None, config=c), ref32, f"config {c}")


def test_bad_configs_are_rejected():
    with pytest.raises(ValueError, match="'kernel'"):
        ik._check_config({"BLOCK_M": 16})
    with pytest.raises(ValueError, match="lacks"):
        ik._check_config({"kernel": "two_pass", "BLOCK_M": 64})
    with pytest.raises(ValueError, match="BLOCK_M must be 1"):
        ik._check_config(ik._fused(8, 16, 64, 4, 1))


# --------------------------------------------------------------------------- input checks
def test_launchers_reject_bad_inputs(kernel_device):
    x, weight_q, weight_scale, b = make_problem(4, 32, 64, torch.bfloat16, True, kernel_device)
    with pytest.raises(ValueError, match="weight_q must be contiguous"):
        ik.linear(x, weight_q.t().contiguous().t(), weight_scale, b)
    with pytest.raises(ValueError, match="K=48"):
        ik.linear(x[:, :48], weight_q, weight_scale, b)
    with pytest.raises(TypeError, match="int8"):
        ik.linear(x, weight_q.float(), weight_scale, b)
    with pytest.raises(ValueError, match="weight_scale"):
        ik.linear(x, weight_q, weight_scale.double(), b)
    with pytest.raises(ValueError, match="bias"):
        ik.linear(x, weight_q, weight_scale, b[:5])
    with pytest.raises(ValueError, match="last dimension"):
        ik.linear(x.t().contiguous().t(), weight_q, weight_scale, b)
    with pytest.raises(TypeError, match="x must have dtype"):
        ik.quantize_act(x.double())
    with pytest.raises(ValueError, match="x_scale"):
        ik.gemm(weight_q[:4], torch.ones(3, device=kernel_device), weight_q, weight_scale)
    big_k = ik.MAX_K + 1
    with pytest.raises(ValueError, match="overflows"):
        ik.gemm(torch.zeros(1, big_k, dtype=torch.int8, device=kernel_device), torch.ones(1, device=kernel_device),
                torch.zeros(1, big_k, dtype=torch.int8, device=kernel_device), torch.ones(1, device=kernel_device))


# --------------------------------------------------------------------------- GPU: real shapes, compile, graphs
LLAMA = [(4096, 4096), (14336, 4096), (4096, 14336)]


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", LLAMA)
def test_real_shapes_gpu(n, k):
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    weight_q, weight_scale = ik.quantize_weight(w)
    rq, rs = R.quantize_weight_int8_per_channel(w)
    assert torch.equal(weight_q, rq) and torch.equal(weight_scale, rs)
    for m in (1, 16, 128, 1024):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        x_q, x_scale = ik.quantize_act(x)
        rxq, rxs = R.quantize_act_int8_per_token(x)
        assert torch.equal(x_q, rxq) and torch.equal(x_scale, rxs), f"activation codes M={m}"
        y = ik.linear(x, weight_q, weight_scale)  # tuned or default config, as the layer runs it
        # the reference forward, its float64 GEMM done once
        ref32 = R.int8_gemm_int32(rxq, weight_q).float() * rxs[:, None] * weight_scale[None, :]
        ref = ref32.to(x.dtype)
        assert_scaled_close(y, ref32, f"M={m} N={n} K={k}")
        exact = F.linear(x.double(), w.double())
        err, ref_err = rel_error(y, exact), rel_error(ref, exact)
        assert err <= ref_err * 1.02 + 1e-6, f"M={m} N={n} K={k}: error {err:.5f} > reference's {ref_err:.5f}"


@pytest.mark.gpu
def test_every_candidate_config_gpu():
    """Every config the sweep may pick, compiled for sm_90 (wgmma, TMA): exact int32 and right outputs."""
    n, k = 512, 4096  # same specializations as the sweep's (N, K divisible by 16, no bias, bf16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    weight_q, weight_scale = ik.quantize_weight(w)
    seen, exact_checked = set(), set()
    for m_bucket in (1, 16, 128, 1024):
        # M = the sweep's, so that it finds these compilations cached; partial M tiles at 100 (the CPU
        # tests cover them for every variant; this covers wgmma and TMA with masked/zero-filled rows).
        m = 100 if m_bucket == 128 else m_bucket
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        ref32 = reference_linear32(x, weight_q, weight_scale, None)
        x_q, _ = R.quantize_act_int8_per_token(x)
        acc = R.int8_gemm_int32(x_q, weight_q)
        for c in ik.candidate_configs(m_bucket, n, k):
            key = tuple(sorted(c.items()))
            if key in seen:
                continue
            seen.add(key)
            assert_scaled_close(ik.linear(x, weight_q, weight_scale, None, config=c), ref32, f"config {c}")
            # The float32-output GEMM is one more compilation per config: check the accumulator exactly
            # for one pointer and one TMA config per M bucket (all others are covered by the ulp check).
            kind = (m_bucket, c["kernel"], c.get("tma"))
            if c["kernel"] == "two_pass" and kind not in exact_checked:
                exact_checked.add(kind)
                y = ik.gemm(x_q, torch.ones(m, device="cuda"), weight_q, torch.ones(n, device="cuda"), None,
                            torch.float32, config=c)
                # float32 holds these accumulators exactly (|acc| < 2^24 for N(0,1) inputs at K = 4096)
                assert acc.abs().max().item() < 2**24
                assert torch.equal(y.to(torch.int64), acc.to(torch.int64)), f"int32 accumulator, config {c}"


def _small_model():
    import quantkit

    torch.manual_seed(0)
    # ReLU: exact in eager and compiled code alike, so compiled and eager outputs can be compared bitwise
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 128, bias=False))
    model = model.to("cuda", torch.bfloat16).eval()
    quantkit.quantize_(model, "int8-dynamic")
    return model


@pytest.mark.gpu
def test_layer_compiles_fullgraph_gpu():
    from quantkit.layers import Int8DynamicLinear
    from quantkit.ops.dispatch import backend_report

    model = _small_model()
    assert isinstance(model[0], Int8DynamicLinear)
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        for m in (1, 16, 77):
            x = torch.randn(m, 256, device="cuda", dtype=torch.bfloat16)
            assert torch.equal(compiled(x), model(x))
    assert backend_report()[("int8_dynamic.linear", "cuda:0")][0] == "triton"


@pytest.mark.gpu
def test_layer_in_cuda_graph_gpu():
    model = _small_model()
    static_x = torch.randn(16, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                model(static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = model(static_x)
        for _ in range(3):
            new_x = torch.randn_like(static_x)
            static_x.copy_(new_x)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(static_y, model(new_x))
