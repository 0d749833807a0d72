"""int8 dynamic (W8A8) Triton kernels against quantkit.reference.int8.

On the CPU the kernels run in Triton's interpreter (small, odd shapes); the ``gpu`` tests run them at
the Llama shapes of PERFORMANCE.md, every config the sweep may ship at a size with many tiles, under
torch.compile and inside a CUDA graph.

What must match exactly: int8 codes and float32 scales of both quantizers (including values whose
quotient lies next to a rounding tie, where the kernels' reciprocal-and-residual division must agree
with IEEE division), and the int32 accumulator (checked with activations whose scale is exactly 1
and unit weight scales, float32 output). Scaled outputs: within one output ulp of the float32
reference (the interpreter's float32 -> bfloat16 cast truncates, which one ulp also covers; on the
GPU the kernels round like the reference).
"""
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from quantkit.reference import int8 as R
from tests.helpers import assert_graph_replays_like, rel_error

ik = pytest.importorskip("quantkit.kernels.int8_dynamic")

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
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


def random_codes(*shape, device, bound=127):
    return torch.randint(-bound, bound + 1, shape, dtype=torch.int8, device=device)


def unit_scale_rows(m, k, device, bound=125):
    """float32 rows of half-integers in [-bound/2 .. bound/2] with one ±127 in the last column: amax
    127, so x_scale is exactly 1 and the codes are the round-half-even of the values."""
    x = torch.randint(-bound, bound + 1, (m, k), device=device).float() / 2
    x[:, -1] = 127.0
    x[::2, -1] = -127.0
    return x


def near_tie_rows(m, k, device):
    """float32 rows whose quotients x / scale land on, or one float32 ulp beside, a half-integer: the
    values where a division that is not correctly rounded picks the wrong code."""
    amax = torch.exp2(torch.rand(m, device=device) * 40 - 20) * (1 + torch.rand(m, device=device))
    scale = amax / torch.tensor(127.0, device=device)  # tensor / tensor: IEEE division
    half = torch.randint(-127, 127, (m, k), device=device).double() + 0.5
    x = (half * scale.double()[:, None]).float()
    step = torch.randint(-1, 2, (m, k), device=device)
    x = torch.where(step > 0, torch.nextafter(x, torch.full_like(x, float("inf"))), x)
    x = torch.where(step < 0, torch.nextafter(x, torch.full_like(x, -float("inf"))), x)
    x[:, 0] = amax
    return x


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


@pytest.mark.parametrize("shape,launch", [((9, 300), dict(block_k=512, block_r=1, warps=4)),
                                          ((9, 300), dict(block_k=128, block_r=4, warps=1)),
                                          ((6, 1030), dict(block_k=2048, block_r=2, warps=2))])
def test_quantize_act_every_launch_shape(kernel_device, shape, launch):
    """The launch shape (K chunk, rows a program, warps) changes nothing in the codes and scales."""
    x = torch.randn(*shape, dtype=torch.bfloat16, device=kernel_device) * 3
    q = torch.empty(shape, dtype=torch.int8, device=kernel_device)
    s = torch.empty(shape[0], dtype=torch.float32, device=kernel_device)
    ik._quant_rows_into(x, q, shape[1], s, 0, **launch)
    rq, rs = R.quantize_act_int8_per_token(x)
    assert torch.equal(s, rs) and torch.equal(q, rq), f"launch {launch}"


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


def test_quantize_division_is_ieee_next_to_ties(kernel_device):
    """Quotients on and one ulp beside half-integers, scales over 2^±20: the reciprocal-and-residual
    division must round exactly like IEEE division (the reference), in every kernel that quantizes."""
    x = near_tie_rows(16, 256, kernel_device)
    rq, rs = R.quantize_act_int8_per_token(x)
    q, s = ik.quantize_act(x)
    assert torch.equal(s, rs)
    assert torch.equal(q, rq), f"{int((q != rq).sum())} of {q.numel()} codes differ"
    # The fused kernels quantize in registers: identity-like weights expose their codes. With unit
    # weight scales y[m, n] = x_scale[m] * sum_k q[m, k] * w[n, k]; w = rows of the identity picks q[m, n].
    n = 64
    eye = torch.eye(n, 256, device=kernel_device).to(torch.int8)
    ones = torch.ones(n, device=kernel_device)
    for config, rows in ((ik._gemv(16, 128, 4, 2), 2), (ik._fused(32, 128, 4, 2), 16),
                         (ik._stream(16, 64, 4, 2), 16), (ik._stream(32, 32, 2, 2), 3)):
        y = ik.linear(x[:rows], eye, ones, None, config=config)
        codes = torch.round(y.double() / rs[:rows, None].double())
        assert torch.equal(codes, rq[:rows, :n].double()), f"{config['kernel']}: codes differ"


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
    ik._two_pass(16, 16, 64, 4, 2),                     # K % BLOCK_K != 0 -> masked K loop; mma-size tiles
    ik._two_pass(32, 32, 32, 4, 2, group_m=2),          # several row blocks, grouped order
    ik._two_pass(64, 64, 128, 4, 3),                    # wgmma-size tile
    ik._two_pass(16, 32, 64, 4, 2, mode="tma"),         # TMA descriptors (needs K % 16 == 0)
    ik._two_pass(16, 16, 32, 4, 2, mode="persistent"),  # one program per "SM" (4 in the interpreter)
    ik._two_pass(16, 32, 32, 4, 2, split_k=3),          # split-K: uneven splits, some past K
]


@pytest.mark.parametrize("config", GEMM_CONFIGS, ids=lambda c: f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']}-"
                         f"{c['mode']}-sk{c['SPLIT_K']}")
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
    (ik._gemv(16, 64, 4, 1), (3, 40, 150)),
    (ik._gemv(16, 1024, 4, 2), (1, 20, 8300)),   # the amax over more than one 8192-wide chunk
    (ik._fused(32, 64, 4, 2), (17, 40, 150)),    # two row blocks of 16
    (ik._fused(16, 128, 4, 2), (5, 20, 600)),    # the amax over three pipelined 256-wide chunks
    (ik._stream(16, 64, 4, 2), (17, 40, 600)),   # K split over the warps: two row blocks, a partial step
    (ik._stream(32, 32, 2, 2), (1, 20, 512)),    # one row, K a multiple of the step
], ids=["gemv", "gemv-long-row", "dot", "dot-long-row", "stream", "stream-one-row"])
def test_fused_int32_exact(kernel_device, config, mnk):
    m, n, k = mnk
    x = unit_scale_rows(m, k, kernel_device)  # the last column sets the scale: a missed chunk shows
    w_q = random_codes(n, k, device=kernel_device)
    x_q, x_scale = R.quantize_act_int8_per_token(x)
    assert torch.equal(x_scale, torch.ones_like(x_scale))
    y = ik.linear(x, w_q, torch.ones(n, device=kernel_device), None, config=config)
    assert torch.equal(y.to(torch.int64), R.int8_gemm_int32(x_q, w_q).to(torch.int64))


# --------------------------------------------------------------------------- scaled outputs, every variant
LINEAR_CONFIGS = {
    "gemv": ik._gemv(16, 64, 4, 2),
    "fused-dot": ik._fused(32, 64, 4, 2),
    "stream": ik._stream(16, 32, 4, 2),
    "two-pass-16": ik._two_pass(16, 32, 64, 4, 2),
    "two-pass-64": ik._two_pass(64, 64, 64, 4, 2),
    "two-pass-tma": ik._two_pass(32, 32, 64, 4, 2, mode="tma"),
    "two-pass-persistent": ik._two_pass(32, 32, 64, 4, 2, mode="persistent"),
    "two-pass-split": ik._two_pass(16, 32, 32, 4, 2, split_k=2),
}


@pytest.mark.parametrize("variant", list(LINEAR_CONFIGS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mnk,bias", [((1, 77, 123), True), ((5, 123, 123), False), ((33, 300, 256), True)])
def test_linear_matches_reference(kernel_device, variant, dtype, mnk, bias):
    m, n, k = mnk
    if variant == "gemv" and m > 5:
        m = 2  # one program column per row: the interpreter is slow with many
    x, weight_q, weight_scale, b = make_problem(m, n, k, dtype, bias, kernel_device)
    y = ik.linear(x, weight_q, weight_scale, b, config=LINEAR_CONFIGS[variant])
    assert y.dtype == dtype and y.shape == (m, n)
    assert_scaled_close(y, reference_linear32(x, weight_q, weight_scale, b), f"{variant} {dtype} {mnk}")


@pytest.mark.parametrize("out_dtype,k", [(dtype, 200) for dtype in DTYPES] + [(torch.bfloat16, 256)])
def test_gemm_matches_reference(kernel_device, out_dtype, k):
    """``gemm`` on codes already quantized; K = 256 on a narrow layer is where the layer's default is the decode
    kernel, which ``gemm`` does not run (it takes the two-pass GEMM's default)."""
    x = torch.randn(6, k, device=kernel_device)
    x_q, x_scale = R.quantize_act_int8_per_token(x)
    weight_q, weight_scale = R.quantize_weight_int8_per_channel(torch.randn(90, k, device=kernel_device) * 0.02)
    b = torch.randn(90, device=kernel_device, dtype=torch.bfloat16)
    y = ik.gemm(x_q, x_scale, weight_q, weight_scale, b, out_dtype)
    assert y.dtype == out_dtype
    ref32 = R.int8_scaled_gemm(x_q, x_scale, weight_q, weight_scale, b, torch.float32)
    assert_scaled_close(y, ref32, f"gemm -> {out_dtype}")


@pytest.mark.parametrize("m,k,kind", [(1, 96, "gemv"), (7, 96, "stream"), (16, 96, "stream"), (40, 96, "two_pass"),
                                      (40, 8200, "two_pass"), (100, 96, "two_pass"), (100, 8200, "two_pass"),
                                      (300, 96, "two_pass")])
def test_default_dispatch_by_m(kernel_device, m, k, kind):
    """Each M range's default branch runs and is right (config=None takes it on the CPU); split-K at
    16 < M <= 64, and to M = 256 along a long K where the tiles are few."""
    n = 70
    assert ik.default_config(m, n, k)["kernel"] == kind
    assert (ik.default_config(m, n, k).get("SPLIT_K", 1) > 1) == (16 < m <= 64 or (m <= 256 and k > 8192))
    x, weight_q, weight_scale, b = make_problem(m, n, k, torch.bfloat16, True, kernel_device)
    if kernel_device == "cpu":
        y = ik.linear(x, weight_q, weight_scale, b)
    else:
        y = ik.linear(x, weight_q, weight_scale, b, config=ik.default_config(m, n, k))
    assert_scaled_close(y, reference_linear32(x, weight_q, weight_scale, b), f"default config M={m}")


def test_zero_rows_give_bias(kernel_device):
    x, weight_q, weight_scale, b = make_problem(4, 50, 64, torch.float16, True, kernel_device)
    x[1] = 0
    for config in (LINEAR_CONFIGS["gemv"], LINEAR_CONFIGS["fused-dot"], LINEAR_CONFIGS["two-pass-16"]):
        y = ik.linear(x, weight_q, weight_scale, b, config=config)
        assert torch.equal(y[1], b)


def test_two_pass_workspace_padding(kernel_device):
    """K not a multiple of 16: the codes sit in a workspace with rows padded to 16 bytes and the row
    scales behind them; the pointer and (interpreted) TMA kernels read them back right."""
    x, weight_q, weight_scale, b = make_problem(19, 40, 100, torch.float32, True, kernel_device)
    ref32 = reference_linear32(x, weight_q, weight_scale, b)
    for mode in ("pointer", "tma"):
        y = ik.linear(x, weight_q, weight_scale, b, config=ik._two_pass(16, 16, 32, 4, 2, mode=mode))
        assert_scaled_close(y, ref32, f"K=100 {mode}")


# --------------------------------------------------------------------------- configs and the sweep's space
def _bench_cells():
    from quantkit.kernels.tuning import BENCH_M, LLAMA_SHAPES

    return [(m, n, k) for n, k in LLAMA_SHAPES for m in BENCH_M]


def _distinct_candidates():
    seen, configs = set(), []
    for m, n, k in _bench_cells():
        for c in ik.candidate_configs(m, n, k) + [ik.default_config(m, n, k)]:
            key = tuple(sorted(c.items()))
            if key not in seen:
                seen.add(key)
                configs.append((m, c))
    return configs


def test_candidate_space_fits_the_sweep():
    distinct = set()
    for m, n, k in _bench_cells():
        cands = ik.candidate_configs(m, n, k)
        assert 1 <= len(cands) <= 8
        keys = [tuple(sorted(c.items())) for c in cands]
        assert tuple(sorted(ik.default_config(m, n, k).items())) in keys, "the default competes in the sweep"
        for c in cands:
            ik._check_config(c)
            distinct.add(tuple(sorted(c.items())))
        # M <= 16: one launch and the output as the only allocation
        assert all(c["kernel"] != "two_pass" for c in cands) or m > 16
    assert len(distinct) <= 24, f"{len(distinct)} distinct configs over the benchmark cells"


def test_every_candidate_config_is_correct(kernel_device):
    """Each config the sweep may ship computes the right thing (small problem, odd N)."""
    x, weight_q, weight_scale, _ = make_problem(3, 45, 256, torch.bfloat16, False, kernel_device)
    ref32 = reference_linear32(x, weight_q, weight_scale, None)
    for _, c in _distinct_candidates():
        assert_scaled_close(ik.linear(x, weight_q, weight_scale, None, config=c), ref32, f"config {c}")


def test_shipped_table_holds_only_candidates():
    """The shipped per-GPU table names configs of the current search space, each for its own cell."""
    path = Path(ik.__file__).with_name("tuned") / f"{ik.FAMILY}.json"
    table = json.loads(path.read_text()) if path.is_file() else {}
    for gpu, entries in table.items():
        for key, config in entries.items():
            m, n, k = (int(v) for v in key.split(","))
            ik._check_config(config)
            assert config in ik.candidate_configs(m, n, k), f"{gpu} {key}: {config} is not a candidate"


def test_bad_configs_are_rejected():
    with pytest.raises(ValueError, match="'kernel'"):
        ik._check_config({"BLOCK_M": 16})
    with pytest.raises(ValueError, match="lacks"):
        ik._check_config({"kernel": "two_pass", "BLOCK_M": 64})
    with pytest.raises(ValueError, match="mode"):
        ik._check_config(dict(ik._two_pass(64, 64, 64, 4, 2), mode="cluster"))
    with pytest.raises(ValueError, match="BLOCK_M must be >= 16"):
        ik._check_config(ik._two_pass(8, 64, 64, 4, 2))
    for bad in (ik._stream(8, 128, 4, 3), ik._stream(32, 16, 4, 3), ik._stream(32, 128, 4, 3, bm=32),
                ik._stream(24, 128, 4, 3)):
        with pytest.raises(ValueError, match="stream config"):
            ik._check_config(bad)
    with pytest.raises(ValueError, match="SPLIT_K"):
        ik._check_config(ik._two_pass(64, 64, 64, 4, 2, mode="tma", split_k=2))


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
    """The configs the layer runs (shipped table, else default) at every benchmark M, and at M = 300 and 1100 (low in
    their buckets: fit_rows' config): codes, outputs and the error against float64 F.linear of the unquantized
    weight."""
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    weight_q, weight_scale = ik.quantize_weight(w)
    rq, rs = R.quantize_weight_int8_per_channel(w)
    assert torch.equal(weight_scale, rs), "weight scales"
    assert torch.equal(weight_q, rq), f"weight codes: {int((weight_q != rq).sum())} differ"
    for m in (1, 16, 128, 300, 1024, 1100, 4096):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        x_q, x_scale = ik.quantize_act(x)
        rxq, rxs = R.quantize_act_int8_per_token(x)
        assert torch.equal(x_scale, rxs), f"activation scales M={m}"
        assert torch.equal(x_q, rxq), f"activation codes M={m}: {int((x_q != rxq).sum())} differ"
        y = ik.linear(x, weight_q, weight_scale)  # tuned or default config, as the layer runs it
        ref32 = R.int8_gemm_int32(rxq, weight_q).float() * rxs[:, None] * weight_scale[None, :]
        assert_scaled_close(y, ref32, f"M={m} N={n} K={k}")
        exact = F.linear(x.double(), w.double())
        err, ref_err = rel_error(y, exact), rel_error(ref32.to(x.dtype), exact)
        assert err <= ref_err * 1.02 + 1e-6, f"M={m} N={n} K={k}: error {err:.5f} > reference's {ref_err:.5f}"
        del x, x_q, rxq, y, ref32, exact


@pytest.mark.gpu
def test_every_candidate_config_gpu():
    """Every config the sweep may pick (and every default), compiled for this GPU, at the sweep's M
    with many tiles (N = 1024, K = 4096: the sweep's specializations, so it reuses these compilations):
    outputs within one ulp, which a race or a miscompiled pipeline (wrong K blocks) cannot meet. Then
    the int32 accumulator exactly, for one config of each kernel and GEMM mode."""
    n, k = 1024, 4096
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    weight_q, weight_scale = ik.quantize_weight(w)
    exact_w = random_codes(n, k, device="cuda", bound=8)
    exact_checked = set()
    problems = {}
    for m, c in _distinct_candidates():
        if m not in problems:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            problems[m] = (x, reference_linear32(x, weight_q, weight_scale, None))
        x, ref32 = problems[m]
        assert_scaled_close(ik.linear(x, weight_q, weight_scale, None, config=c), ref32, f"M={m} config {c}")
        kind = (c["kernel"], c.get("mode"), c.get("SPLIT_K", 1) > 1)  # (PDL changes no arithmetic)
        if kind not in exact_checked:
            exact_checked.add(kind)
            xs = unit_scale_rows(m, k, "cuda", bound=16)  # |acc| <= 127·8 + 8·8·K < 2^24: exact in float32
            x_q, _ = R.quantize_act_int8_per_token(xs)
            y = ik.linear(xs, exact_w, torch.ones(n, device="cuda"), None, config=c)
            acc = R.int8_gemm_int32(x_q, exact_w)
            assert torch.equal(y.to(torch.int64), acc.to(torch.int64)), f"int32 accumulator M={m} config {c}"
    # partial M and N tiles with the large-M default (the CPU tests cover the masks of every variant)
    x, wq, ws, b = make_problem(1000, 1000, k, torch.bfloat16, True, "cuda")
    c = ik.default_config(1000, 1000, k)
    assert_scaled_close(ik.linear(x, wq, ws, b, config=c), reference_linear32(x, wq, ws, b), f"M=1000 {c}")


@pytest.mark.gpu
def test_pdl_two_pass_in_cuda_graph_gpu():
    """The two-pass path with programmatic dependent launch, eager and replayed from a CUDA graph."""
    config = ik._two_pass(64, 64, 128, 4, 4, pdl=True)
    x, weight_q, weight_scale, b = make_problem(128, 1024, 4096, torch.bfloat16, True, "cuda")
    ref32 = reference_linear32(x, weight_q, weight_scale, b)
    assert_scaled_close(ik.linear(x, weight_q, weight_scale, b, config=config), ref32, "pdl eager")
    layer = lambda t: ik.linear(t, weight_q, weight_scale, b, config=config)  # noqa: E731
    assert_graph_replays_like(layer, x.clone(), layer)


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
@pytest.mark.parametrize("m", [1, 16, 128])  # GEMV, fused tl.dot, two-pass with its workspace
def test_layer_in_cuda_graph_gpu(m):
    model = _small_model()
    static_x = torch.randn(m, 256, device="cuda", dtype=torch.bfloat16)
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


@pytest.mark.parametrize("M,low", [(300, True), (384, True), (512, True), (513, False), (530, False), (700, False),
                                   (1024, False), (1100, True), (1331, True), (1400, True), (1401, False), (2048, False),
                                   (2100, False), (2600, False), (4096, False), (5000, False)])
def test_fit_rows_low_in_a_bucket(M, low):
    from quantkit.kernels import int8_dynamic as d

    tuned = {"kernel": "two_pass", "BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "SPLIT_K": 1,
             "num_warps": 8, "num_stages": 4, "mode": "gluon", "pdl": True}
    assert (d.fit_rows(tuned, M) is d.LOW_IN_BUCKET_CONFIG) == low
    assert (d.fit_rows(dict(tuned, mode="gluon_ws"), M) is d.LOW_IN_BUCKET_CONFIG) == low
    for other in (dict(tuned, mode="tma"), {"kernel": "decode"}):  # the Triton kernels' and other tables' entries
        assert d.fit_rows(other, M) is other
    d._check_config(d.LOW_IN_BUCKET_CONFIG)
