"""FP8 block-wise Triton kernels against quantkit.reference.fp8_block.

On the CPU the kernels run in Triton's interpreter at small, odd shapes; the ``gpu`` tests run them
at the Llama shapes of PERFORMANCE.md, every candidate config, under torch.compile and in a CUDA graph.

What must match exactly: float32 scales and e4m3 codes of both quantizers (under the interpreter,
codes up to its known float32 -> e4m3 rounding bug, see tests.helpers), and dequantized weights.
GEMM outputs are compared with the float32 reference computed from the *same* codes, within one
ulp of the output dtype (the interpreter truncates float32 -> bfloat16, which one ulp covers) plus
the float32 re-association error of summing per K block, bounded by eps·Σ|x̂·ŵ|. On the GPU the fp8
tensor cores accumulate each 128-deep block in reduced precision (~2^-14 per add, DeepSeek-V3 §3.3),
which the larger GPU eps covers; the layer's error against a float64 F.linear must still be no worse
than the reference's own.
"""
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from quantkit.reference import fp8_block as R
from quantkit.reference.common import AMAX_EPS
from tests.helpers import assert_fp8_codes_match, rel_error

fk = pytest.importorskip("quantkit.kernels.fp8_block")

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
_FRACTION_BITS = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}
LLAMA = [(4096, 4096), (14336, 4096), (4096, 14336)]

# One config per kernel variant the module ships (small tiles: the interpreter's cost grows with them).
VARIANTS = {
    "gemv": fk._gemv(16, 2, 4),
    "swap-fused": fk._swap(16, 16, 1, 4, 2, True),
    "swap-fused-groups": fk._swap(32, 8, 2, 4, 2, True),
    "swap": fk._swap(64, 32, 2, 4, 2, False),
    "stream-fused": fk._stream(16, 8, 4, 2),
    "stream": fk._stream(32, 4, 2, 2, False),
    "tiled": fk._tiled(32, 64, 4, 2, False),
    "tiled-tma": fk._tiled(16, 128, 4, 2, True),
}


# --------------------------------------------------------------------------- helpers
def _ulp(ref32: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One unit in the last place of ``dtype`` at the magnitude of ``ref32`` (subnormals included)."""
    _, exp = torch.frexp(ref32.double().abs())
    min_exp = {torch.bfloat16: -125, torch.float16: -13, torch.float32: -125}[dtype]
    return torch.ldexp(torch.ones_like(ref32, dtype=torch.float64), exp.clamp(min=min_exp) - 1 - _FRACTION_BITS[dtype])


def assert_gemm_close(y, ref32, abs32, what, eps=None):
    """|y − ref32| ≤ 1 ulp(y.dtype) + eps·Σ|x̂·ŵ| elementwise, and a norm-wise bound that a single
    wrong K block or tile would break."""
    if eps is None:
        eps = 2.0 ** -12 if y.is_cuda else 2.0 ** -20
    assert y.shape == ref32.shape, f"{what}: shape {tuple(y.shape)} != {tuple(ref32.shape)}"
    assert not torch.isnan(y).any(), f"{what}: NaN in output"
    diff = (y.double() - ref32.double()).abs()
    tol = _ulp(ref32, y.dtype) + eps * abs32.double()
    bad = diff > tol
    if bad.any():
        idx = bad.nonzero()[:5]
        rows = [f"  at {tuple(i.tolist())}: got {y[tuple(i)].item():.8g}, float32 reference "
                f"{ref32[tuple(i)].item():.8g} (tolerance {tol[tuple(i)].item():.3g})" for i in idx]
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} outputs out of tolerance; first:\n"
                             + "\n".join(rows))
    bound = {torch.float32: 1e-3, torch.float16: 2e-3, torch.bfloat16: 8e-3}[y.dtype]
    err = rel_error(y, ref32)
    assert err <= bound, f"{what}: relative error {err:.3g} > {bound}"


def reference32(x_q, x_s, weight_q, weight_scale, bias, block=128):
    """The reference GEMM in float32 and Σ|x̂·ŵ| (the scale of its rounding error)."""
    ref = R.fp8_block_gemm(x_q, x_s, weight_q, weight_scale, bias, torch.float32, block)
    xa = R.dequantize_act_fp8_group(x_q, x_s, block).abs()
    wa = R.dequantize_weight_fp8_block(weight_q, weight_scale, block).abs()
    return ref, xa @ wa.t()


def make_problem(m, n, k, dtype, bias, device, scale_fmt=None, block=128):
    x = torch.randn(m, k, dtype=dtype, device=device)
    w = torch.randn(n, k, device=device) * 0.02
    weight_q, weight_scale = R.quantize_weight_fp8_block(w, block, scale_fmt)
    b = (torch.randn(n, device=device) * 0.02).to(dtype) if bias else None
    return x, w, weight_q, weight_scale, b


def check_linear(x, weight_q, weight_scale, bias, what, config=None, scale_fmt=None, block=128):
    y = fk.linear(x, weight_q, weight_scale, bias, block, scale_fmt, config=config)
    assert y.dtype == x.dtype and y.shape == (x.shape[0], weight_q.shape[0])
    # The kernel's own activation codes (bit-exact with the reference on the GPU, and carrying the
    # interpreter's rounding bug on the CPU, as the fused in-register quantization does too).
    x_q, x_s = fk.quantize_act(x, block, scale_fmt)
    ref, abs32 = reference32(x_q, x_s, weight_q, weight_scale, bias, block)
    assert_gemm_close(y, ref, abs32, what)
    return y


def _excuse_cap(dtype, scale_fmt):
    """bf16 values over power-of-two scales land exactly on e4m3 ties often (~7 % measured), which the
    interpreter rounds the wrong way: a higher cap, each excused code still checked to be that bug."""
    return 0.1 if dtype == torch.bfloat16 and scale_fmt == "ue8m0" else 0.05


def _weight_precast(w, scale, block=128):
    n, k = w.shape
    s = scale.repeat_interleave(block, 0)[:n].repeat_interleave(block, 1)[:, :k]
    return (w.float() / s).clamp(-448, 448)


def _act_precast(x, scale, block=128):
    return (x.float() / scale.repeat_interleave(block, 1)[:, :x.shape[1]]).clamp(-448, 448)


# --------------------------------------------------------------------------- quantizers (CPU + GPU)
@pytest.mark.parametrize("shape,dtype,scale_fmt", [
    ((200, 300), torch.float32, None), ((128, 256), torch.bfloat16, None),
    ((5, 123), torch.float16, "ue8m0"), ((130, 129), torch.bfloat16, "ue8m0")])
def test_quantize_weight_bit_exact(kernel_device, shape, dtype, scale_fmt):
    w = (torch.randn(*shape, device=kernel_device) * 0.02).to(dtype)
    w[:3, :7] *= 50  # one block with a much larger amax
    q, s = fk.quantize_weight(w, 128, scale_fmt)
    q_ref, s_ref = R.quantize_weight_fp8_block(w, 128, scale_fmt)
    assert q.dtype == torch.float8_e4m3fn and s.dtype == torch.float32 and q.is_contiguous()
    assert torch.equal(s, s_ref), "weight scales differ"
    assert_fp8_codes_match(q, q_ref, _weight_precast(w, s_ref), INTERPRETED, "weight codes",
                           max_excused=_excuse_cap(dtype, scale_fmt))


def test_quantize_weight_zero_block_and_strided_input(kernel_device):
    w = torch.randn(260, 200, device=kernel_device) * 0.02
    w[128:256, :128] = 0.0  # an all-zero block: scale AMAX_EPS/448, codes 0
    wt = w.t().contiguous().t()  # same values, column-major
    q, s = fk.quantize_weight(wt)
    q_ref, s_ref = R.quantize_weight_fp8_block(w)
    assert torch.equal(s, s_ref)
    assert s[1, 0].item() == pytest.approx(AMAX_EPS / 448, rel=1e-6)
    zero = torch.zeros_like(w, dtype=torch.bool)
    zero[128:256, :128] = True
    assert (q[zero].view(torch.uint8) == 0).all()
    # (helpers' excuse rate would count the matching zero codes of the zero block as excused)
    assert_fp8_codes_match(q[~zero], q_ref[~zero], _weight_precast(w, s_ref)[~zero], INTERPRETED, "weight codes")


@pytest.mark.parametrize("dtype", DTYPES)
def test_dequantize_weight(kernel_device, dtype):
    w = torch.randn(200, 300, device=kernel_device) * 0.02
    q, s = R.quantize_weight_fp8_block(w)
    got = fk.dequantize_weight(q, s, 128, dtype)
    want = R.dequantize_weight_fp8_block(q, s, 128, dtype)
    if dtype == torch.bfloat16 and INTERPRETED:
        # The interpreter truncates float32 -> bfloat16; the GPU rounds to nearest even like torch.
        exact = R.dequantize_weight_fp8_block(q, s, 128, torch.float32)
        truncated = (exact.view(torch.int32) & -65536).view(torch.float32).to(torch.bfloat16)
        assert torch.equal(got, truncated)
    else:
        assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,scale_fmt", [((1, 640), None), ((5, 123), None), ((33, 300), "ue8m0")])
def test_quantize_act_bit_exact(kernel_device, dtype, shape, scale_fmt):
    x = torch.randn(*shape, device=kernel_device).to(dtype) * 3
    if shape[0] >= 5:
        x[1] = 0.0  # all-zero groups: scale AMAX_EPS/448, codes 0
        x[2, :64] = -0.0  # negative zeros keep their sign bit
        x[3, 5] = 1000.0  # one dominant element
    q, s = fk.quantize_act(x, 128, scale_fmt)
    q_ref, s_ref = R.quantize_act_fp8_group(x, 128, scale_fmt)
    assert q.dtype == torch.float8_e4m3fn and s.shape == s_ref.shape
    assert torch.equal(s, s_ref), "activation scales differ"
    zero = x == 0
    assert torch.equal(q[zero].view(torch.uint8), q_ref[zero].view(torch.uint8)), "codes of ±0 differ"
    assert_fp8_codes_match(q[~zero], q_ref[~zero], _act_precast(x, s_ref)[~zero], INTERPRETED, "activation codes",
                           max_excused=_excuse_cap(dtype, scale_fmt))


@pytest.mark.parametrize("block_m,gpp", [(4, 2), (2, 4), (1, 8), (16, 4)])
def test_quantize_act_launch_shapes_write_the_same_codes(kernel_device, block_m, gpp):
    """Several groups a program (the large-M launch shapes), with groups and rows past the edges: the
    codes and scales of the one-group-a-program launch, bit for bit."""
    x = torch.randn(5, 700, device=kernel_device, dtype=torch.bfloat16) * 3  # 6 groups, the last partial
    x[2, :200] = 0.0
    for block in (128, 64):
        want_q, want_s = fk.quantize_act(x, block)
        q = torch.full_like(want_q, 1.0)
        s = torch.full((x.shape[0], -(-700 // block)), -1.0, device=kernel_device)
        fk._launch_act_quant(x, q, s, s.stride(0), s.stride(1), block, False, block_m=block_m, gpp=gpp)
        assert torch.equal(s, want_s), f"block {block}: scales differ"
        assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8)), f"block {block}: codes differ"


def test_quantize_act_strided_rows_and_block_64(kernel_device):
    big = torch.randn(7, 400, device=kernel_device, dtype=torch.bfloat16)
    x = big[:, 10:310]  # row stride 400, last dim contiguous
    for block in (128, 64):
        q, s = fk.quantize_act(x, block)
        q_ref, s_ref = R.quantize_act_fp8_group(x, block)
        assert torch.equal(s, s_ref)
        assert_fp8_codes_match(q, q_ref, _act_precast(x, s_ref, block), INTERPRETED, f"codes (block {block})")


# --------------------------------------------------------------------------- GEMMs (CPU + GPU)
@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "gemv"])
@pytest.mark.parametrize("mnk,out_dtype,bias", [((1, 77, 123), torch.float32, True),
                                                ((21, 136, 256), torch.bfloat16, False)])
def test_gemm_matches_reference(kernel_device, variant, mnk, out_dtype, bias):
    m, n, k = mnk
    x, _, weight_q, weight_scale, b = make_problem(m, n, k, torch.float32, bias, kernel_device)
    x_q, x_s = R.quantize_act_fp8_group(x)
    y = fk.gemm(x_q, x_s, weight_q, weight_scale, b, out_dtype, config=VARIANTS[variant])
    assert y.dtype == out_dtype
    ref, abs32 = reference32(x_q, x_s, weight_q, weight_scale, b)
    assert_gemm_close(y, ref, abs32, f"gemm {variant} {mnk}")


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("mnk,dtype,bias", [
    ((1, 77, 123), torch.bfloat16, True), ((5, 123, 256), torch.float16, False),
    ((33, 136, 300), torch.float32, True), ((17, 129, 128), torch.bfloat16, False)])
def test_linear_matches_reference(kernel_device, variant, mnk, dtype, bias):
    m, n, k = mnk
    x, _, weight_q, weight_scale, b = make_problem(m, n, k, dtype, bias, kernel_device)
    check_linear(x, weight_q, weight_scale, b, f"linear {variant} {dtype} {mnk}", config=VARIANTS[variant])


@pytest.mark.parametrize("m", [1, 16, 40, 100, 300])
def test_default_dispatch_by_m(kernel_device, m):
    """config=None: the tuned table on a GPU, default_config under the interpreter; every M branch."""
    x, _, weight_q, weight_scale, b = make_problem(m, 70, 200, torch.bfloat16, True, kernel_device)
    check_linear(x, weight_q, weight_scale, b, f"default config, M={m}")


def test_default_gemm_at_17_to_64_rows_follows_the_tile_count():
    """Past M = 16 the decode kernel on narrow layers only; then by N / 64 tiles against 132 SMs: the Gluon GEMM where
    two tiles an SM cover N (split in two from K = 4096), the swap kernel split in two to one wave, whole past it
    (one K block a step where K < 4096)."""
    assert fk.default_config(64, 1024, 4096)["kernel"] == "decode"
    assert fk.default_config(32, 2048, 4096)["kernel"] == "decode"
    cases = {(64, 2048, 2048): ("gluon", 1, None), (64, 3584, 18944): ("gluon", 2, None),
             (64, 5120, 13824): ("swap", 2, 2), (64, 12288, 4096): ("swap", 1, 2), (64, 18944, 3584): ("swap", 1, 1)}
    for (m, n, k), (kind, split, groups) in cases.items():
        config = fk.default_config(m, n, k)
        assert (config["kernel"], config.get("SPLIT_K", 1), config.get("GROUPS")) == (kind, split, groups), (m, n, k)
    # gemm() on codes it is given, where the decode kernel cannot run: the same GEMM rule as linear() (not one
    # swap config for every decode-sized layer), the swap kernel where the default quantizes x itself
    assert fk._triton_gemm_config(64, 1024, 4096, 128) == fk._gemm_default(64, 1024, 4096)
    assert fk._triton_gemm_config(64, 18944, 3584, 128) == fk.default_config(64, 18944, 3584)
    assert fk._triton_gemm_config(16, 4096, 4096, 128) == fk._swap(64, 64, 1, 4, 4, False)
    assert fk._triton_gemm_config(2048, 4096, 4096, 128)["kernel"] == "gluon"


@pytest.mark.parametrize("split,groups,k,want", [(2, 1, 1024, 2), (4, 1, 1000, 4), (2, 2, 2048, 2), (16, 1, 1024, 8),
                                                 (2, 1, 640, 1)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_swap_split_k(kernel_device, monkeypatch, split, groups, k, want, dtype):
    """The swap kernel with K split over programs: float32 partials summed with the bias by a second
    kernel. The host splits the steps evenly: 8 steps into 2, 4 or (capped) 8 splits, a ragged last
    block (K = 1000) in the last split, two blocks a step; 5 steps cannot split in 2 and run unsplit.
    ``gemm`` takes the same configs."""
    launched = []
    real = fk._splitk_sum_fast

    class Spy:  # records the split count of every partial-sum launch
        def __getitem__(self, grid):
            run = real[grid]

            def launch(*args, **kwargs):
                launched.append(kwargs["SPLIT"])
                return run(*args, **kwargs)
            return launch

    monkeypatch.setattr(fk, "_splitk_sum_fast", Spy())
    x, _, weight_q, weight_scale, b = make_problem(33, 70, k, dtype, True, kernel_device)
    config = fk._swap(32, 16, groups, 4, 2, False, split_k=split)
    y = check_linear(x, weight_q, weight_scale, b, f"split {split} groups {groups} K={k}", config=config)
    assert launched == ([want] if want > 1 else []), launched
    x_q, x_s = fk.quantize_act(x)
    assert torch.equal(fk.gemm(x_q, x_s, weight_q, weight_scale, b, dtype, config=config), y)


@pytest.mark.parametrize("block", [16, 32, 64])
def test_default_and_decode_configs_fit_small_blocks(kernel_device, block):
    """Tuned tables and defaults are chosen for 128-wide blocks; at smaller blocks the configs
    ``linear`` and ``gemm`` pick themselves (and the fallbacks of a decode config the kernel cannot
    take: b < DK) must keep every weight tile within one block's scale row: outputs against the
    reference at every M branch."""
    for m in (1, 4, 16, 40, 300):
        x, _, weight_q, weight_scale, b = make_problem(m, 96, 256, torch.bfloat16, m % 2 == 0, kernel_device,
                                                       block=block)
        check_linear(x, weight_q, weight_scale, b, f"block {block} default M={m}", block=block)
        check_linear(x, weight_q, weight_scale, b, f"block {block} decode M={m}", config=fk._decode(1, 4, dk=128),
                     block=block)
        x_q, x_s = fk.quantize_act(x, block)
        ref, abs32 = reference32(x_q, x_s, weight_q, weight_scale, b, block)
        for config in (None, fk._decode(1, 4, dk=128)):
            y = fk.gemm(x_q, x_s, weight_q, weight_scale, b, torch.float32, block, config=config)
            assert_gemm_close(y, ref, abs32, f"gemm block {block} M={m} {config}")


@pytest.mark.parametrize("variant", ["gemv", "swap-fused", "swap", "tiled"])
def test_ue8m0_scales(kernel_device, variant):
    m = 3 if variant == "gemv" else 9
    x, _, weight_q, weight_scale, b = make_problem(m, 130, 200, torch.bfloat16, True, kernel_device, "ue8m0")
    check_linear(x, weight_q, weight_scale, b, f"ue8m0 {variant}", config=VARIANTS[variant], scale_fmt="ue8m0")


@pytest.mark.parametrize("variant", ["gemv", "swap-fused-groups", "tiled-tma"])
def test_block_size_64_and_strided_x(kernel_device, variant):
    big = torch.randn(6, 260, device=kernel_device, dtype=torch.float16)
    x = big[:, :200]
    w = torch.randn(90, 200, device=kernel_device) * 0.02
    weight_q, weight_scale = fk.quantize_weight(w, 64)
    config = dict(VARIANTS[variant])
    if config["kernel"] == "tiled":
        config["BLOCK_N"] = 64  # BLOCK_N must divide the 64-wide block
    check_linear(x, weight_q, weight_scale, None, f"block 64 {variant}", config=config, block=64)


def test_candidate_space_fits_the_sweep():
    distinct = set()
    for n, k in LLAMA:
        for m in (1, 16, 128, 1024, 4096):
            cands = fk.candidate_configs(m, n, k)
            assert 1 <= len(cands) <= 8
            for c in cands + [fk.default_config(m, n, k)]:
                fk._check_config(c, 128)
                distinct.add(tuple(sorted(c.items())))
                if m <= 16:  # decode sizes: nothing allocated but the output (GPU test below)
                    assert c["fuse_act_quant"] or c["kernel"] == "decode", \
                        f"M={m}: {c} quantizes x into a separate buffer"
    assert len(distinct) <= 24, f"{len(distinct)} distinct configs over the benchmark cells"
    for m in (1, 2, 5, 16, 17, 33, 64, 65, 200, 257, 3000, 9000):
        fk._check_config(fk.default_config(m, 4096, 4096), 128)


def test_shipped_table_holds_valid_configs():
    """The per-GPU table the sweep refills: every entry must be a config this module accepts."""
    import json
    from pathlib import Path

    path = Path(fk.__file__).with_name("tuned") / "fp8_block.json"
    table = json.loads(path.read_text()) if path.is_file() else {}
    for gpu, entries in table.items():
        for key, config in entries.items():
            fk._check_config(config, 128)
            if int(key.split(",")[0]) <= 16:
                assert config["fuse_act_quant"] or config["kernel"] == "decode", \
                    f"{gpu} {key}: decode-size config that quantizes x into a separate buffer"
            if int(key.split(",")[0]) <= 256:  # cuBLAS's host cost outweighs it there (see _cublas)
                assert config["kernel"] != "cublas", f"{gpu} {key}: cuBLAS GEMM at M <= 256"


def test_bad_configs_are_rejected():
    with pytest.raises(ValueError, match="kernel"):
        fk._check_config({"BLOCK_M": 64}, 128)
    with pytest.raises(ValueError, match="lacks"):
        fk._check_config({"kernel": "tiled", "BLOCK_M": 64}, 128)
    with pytest.raises(ValueError, match=r"fp8_block tiled config .* does not take: \['NUM_STAGES'\]"):
        fk._check_config(dict(fk._tiled(64, 128, 4, 3, False), NUM_STAGES=3), 128)
    with pytest.raises(ValueError, match="BLOCK_N"):
        fk._check_config(fk._tiled(64, 96, 4, 3, False), 128)
    with pytest.raises(ValueError, match="BLOCK_N"):
        fk._check_config(fk._tiled(64, 256, 8, 3, False), 128)
    with pytest.raises(ValueError, match="BLOCK_W"):
        fk._check_config(fk._swap(256, 16, 1, 4, 3, False), 128)
    with pytest.raises(ValueError, match="GROUPS"):
        fk._check_config(fk._swap(32, 16, 3, 4, 3, True), 128)
    with pytest.raises(ValueError, match="fuse_act_quant"):
        fk._check_config(dict(fk._gemv(16, 4, 4), fuse_act_quant=False), 128)
    with pytest.raises(ValueError, match="fuse_act_quant"):
        fk._check_config(dict(fk._tiled(64, 128, 4, 3, False), fuse_act_quant=True), 128)
    with pytest.raises(ValueError, match="num_warps"):
        fk._check_config(dict(fk._swap(32, 16, 1, 4, 3, True), num_warps=6), 128)
    with pytest.raises(ValueError, match="SPLIT_K"):
        fk._check_config(fk._swap(64, 64, 1, 4, 3, True, split_k=2), 128)
    with pytest.raises(ValueError, match="SPLIT_K"):
        fk._check_config(fk._swap(64, 64, 1, 4, 3, False, split_k=3), 128)
    with pytest.raises(ValueError, match="SPLIT_K"):
        fk._check_config(dict(fk._stream(32, 8, 4, 3, False), SPLIT_K=2), 128)
    with pytest.raises(ValueError, match="PDL"):
        fk._check_config(fk._swap(64, 16, 2, 4, 4, True, pdl=True), 128)  # fused: no grid before it
    with pytest.raises(ValueError, match="PDL"):
        fk._check_config(dict(fk._swap(64, 64, 2, 4, 3, False), PDL=1), 128)
    with pytest.raises(ValueError, match="PDL"):
        fk._check_config(dict(fk._tiled(64, 128, 4, 3, False), PDL=True), 128)
    with pytest.raises(ValueError, match="PDL"):
        fk._check_config(dict(fk._cublas(), PDL=True), 128)


def test_launchers_reject_bad_inputs(kernel_device):
    x, _, weight_q, weight_scale, b = make_problem(3, 70, 130, torch.bfloat16, True, kernel_device)
    with pytest.raises(ValueError, match="weight_q must"):
        fk.linear(x, torch.empty(130, 140, dtype=weight_q.dtype, device=kernel_device)[:, :130].t(), weight_scale)
    with pytest.raises(ValueError, match="weight_scale"):
        fk.linear(x, weight_q, weight_scale[:, :1])
    with pytest.raises(TypeError, match="x must have dtype"):
        fk.linear(x.to(torch.int32), weight_q, weight_scale)
    with pytest.raises(ValueError, match="unit stride"):
        fk.linear(x.t().contiguous().t(), weight_q, weight_scale)
    with pytest.raises(ValueError, match="bias"):
        fk.linear(x, weight_q, weight_scale, b[:10])
    with pytest.raises(ValueError, match="input features"):
        fk.linear(x[:, :100], weight_q, weight_scale)
    with pytest.raises(ValueError, match="block_size"):
        fk.linear(x, weight_q, weight_scale, None, 96)
    with pytest.raises(ValueError, match="scale_fmt"):
        fk.quantize_act(x, 128, "e8m0")
    with pytest.raises(ValueError, match="x_scale"):
        fk.gemm(weight_q[:3], torch.ones(3, 1, device=kernel_device), weight_q, weight_scale)


# --------------------------------------------------------------------------- GPU only
@pytest.mark.gpu
@pytest.mark.parametrize("scale_fmt", [None, "ue8m0"])
def test_quantizers_bit_exact_gpu(scale_fmt):
    torch.manual_seed(1)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) * 0.02
    q, s = fk.quantize_weight(w, 128, scale_fmt)
    q_ref, s_ref = R.quantize_weight_fp8_block(w, 128, scale_fmt)
    assert torch.equal(s, s_ref), f"weight scales differ in {int((s != s_ref).sum())} of {s.numel()} blocks"
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)), "weight codes differ"
    # The reference computes amax / 448 as IEEE division on the GPU too (div_exact): compare with
    # float64 division rounded once to float32, which is what IEEE float32 division gives.
    amax = w.float().view(32, 128, 32, 128).abs().amax(dim=(1, 3)).clamp(min=AMAX_EPS)
    if scale_fmt is None:
        assert torch.equal(s, (amax.double() / 448).float()), "weight scales are not amax / 448 in IEEE"
    for dtype in DTYPES:
        x = (torch.randn(1024, 4096 + 40, device="cuda") * torch.rand(1024, 1, device="cuda") * 10).to(dtype)
        x[0] = 0.0
        x[1, ::3] = -0.0
        q, s = fk.quantize_act(x, 128, scale_fmt)
        q_ref, s_ref = R.quantize_act_fp8_group(x, 128, scale_fmt)
        assert torch.equal(s, s_ref), f"{dtype}: scales differ"
        assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)), f"{dtype}: codes differ"
    # Quotients exactly on and next to e4m3 midpoints, each group led by its own amax: the
    # reciprocal-and-fma division must give the IEEE quotient, or the codes differ here.
    rows = []
    codes = torch.arange(0, 127, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn).float()
    mids = (codes[:-1] + codes[1:]) / 2  # the 126 rounding midpoints below 448
    for amax in (1.0, 3.7, 1e-3, 123.456, 2.0 ** -20, 7e4):
        lead = torch.tensor([amax], device="cuda")
        s1 = R.quantize_act_fp8_group(lead[None], 128, scale_fmt)[1].reshape(())
        for t in (mids, torch.nextafter(mids, mids + 1), torch.nextafter(mids, mids - 1)):
            for sign in (1.0, -1.0):
                v = (t * s1 * sign).float()
                v = v[v.abs() <= amax]  # keep the group's amax (ue8m0 scales are rounded up)
                rows.append(F.pad(torch.cat([lead, v]), (0, 128 - 1 - v.numel())))
    x = torch.stack(rows)
    q, s = fk.quantize_act(x, 128, scale_fmt)
    q_ref, s_ref = R.quantize_act_fp8_group(x, 128, scale_fmt)
    assert torch.equal(s, s_ref)
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)), "midpoint codes differ"


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", LLAMA)
def test_real_shapes_gpu(n, k):
    """config=None (the shipped table, else default_config) at the benchmark shapes. Each M is checked
    in two steps, so a failure says which: the kernel's activation codes against the reference's
    (bit-exact), then the GEMM against the float32 reference built from those codes. M = 2048 and 4096:
    the large-M entries (cuBLAS or the Gluon GEMM, per cell)."""
    torch.manual_seed(2)
    w = (torch.randn(n, k, device="cuda") * 0.02).bfloat16()
    weight_q, weight_scale = fk.quantize_weight(w)
    failures = []
    for m in (1, 16, 128, 1024, 2048, 4096):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        x_q, x_s = R.quantize_act_fp8_group(x)
        kq, ks = fk.quantize_act(x)
        if not (torch.equal(ks, x_s) and torch.equal(kq.view(torch.uint8), x_q.view(torch.uint8))):
            failures.append(f"M={m}: activation codes/scales differ from the reference")
            continue
        y = fk.linear(x, weight_q, weight_scale)
        ref32, abs32 = reference32(x_q, x_s, weight_q, weight_scale, None)
        try:
            assert_gemm_close(y, ref32, abs32, f"M={m} N={n} K={k} config {fk._tuned_config(x, m, n, k, None)}")
        except AssertionError as exc:
            failures.append(str(exc))
            continue
        y_ref = R.fp8_block_linear(x, weight_q, weight_scale)
        exact = F.linear(x.double(), w.double())
        err, err_ref = rel_error(y, exact), rel_error(y_ref, exact)
        if not err <= err_ref * 1.02 + 1e-6:
            failures.append(f"M={m} N={n} K={k}: error {err:.5f} vs reference {err_ref:.5f}")
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_decode_allocates_only_the_output_gpu():
    """M ≤ 16 with config=None: the output's block is the only allocation (the fused kernels quantize
    x themselves; the decode path keeps the codes behind the output)."""
    torch.manual_seed(4)
    weight_q, weight_scale = fk.quantize_weight(torch.randn(4096, 4096, device="cuda") * 0.02)
    for m in (1, 16):
        x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        fk.linear(x, weight_q, weight_scale)  # compile, pick the config
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        y = fk.linear(x, weight_q, weight_scale)
        after = torch.cuda.memory_stats()["allocation.all.allocated"]
        assert after - before == 1, f"M={m}: {after - before} allocations per call (want only the output)"
        del y


def _distinct_candidates():
    seen = {}
    for n, k in LLAMA:
        for m in (1, 16, 128, 1024, 4096):
            for c in fk.candidate_configs(m, n, k) + [fk.default_config(m, n, k)]:
                seen.setdefault(tuple(sorted(c.items())), (m, c))
    return list(seen.values())


@pytest.mark.gpu
def test_every_candidate_config_gpu():
    """Every config the sweep may pick, specialized as in the sweep (Triton's cache then serves it)."""
    torch.manual_seed(3)
    for m, c in _distinct_candidates():
        x, _, weight_q, weight_scale, b = make_problem(min(m, 1024), 1024, 1024, torch.bfloat16, False, "cuda")
        check_linear(x, weight_q, weight_scale, b, f"config {c}", config=c)


GPU_EDGE_VARIANTS = [  # (config, x dtype): every kernel path once, at N % 128 != 0, a partial K block, bias
    (fk._gemv(16, 4, 4), torch.float32),
    (fk._swap(64, 1, 2, 4, 5, True), torch.float16),
    (fk._swap(32, 16, 1, 4, 8, True), torch.bfloat16),
    (fk._swap(64, 16, 2, 4, 4, True), torch.bfloat16),
    (fk._swap(128, 16, 2, 4, 3, True), torch.float32),
    (fk._swap(64, 64, 2, 4, 3, False), torch.float16),
    (fk._tiled(128, 128, 8, 4, True), torch.bfloat16),
    (fk._tiled(64, 128, 4, 3, False), torch.float16),
    (fk._stream(16, 16, 4, 4), torch.bfloat16),
    (fk._stream(32, 1, 8, 3), torch.float16),
    (fk._stream(16, 16, 8, 3), torch.float32),
    (fk._stream(16, 16, 4, 3, False), torch.bfloat16),
    (fk._swap(64, 64, 2, 4, 3, False, pdl=True), torch.float16),
    (fk._swap(64, 64, 2, 4, 3, False, split_k=2, pdl=True), torch.bfloat16),
    (fk._gluon(128, 128, 8, 4), torch.float32),
    (fk._gluon(128, 128, 8, 4, pdl=True), torch.float16),
]


@pytest.mark.gpu
@pytest.mark.parametrize("config,dtype", GPU_EDGE_VARIANTS, ids=[
    "gemv-fp32", "swap-fused-m1-fp16", "swap-fused-mma-bf16", "swap-fused-wgmma-bf16", "swap-fused-128-fp32",
    "swap-fp16", "tiled-tma-bf16", "tiled-fp16", "stream-fused-bf16", "stream-fused-m1-fp16",
    "stream-fused-fp32", "stream-bf16", "swap-pdl-fp16", "swap-split-pdl-bf16", "gluon-fp32", "gluon-pdl-fp16"])
def test_kernel_paths_at_edges_gpu(config, dtype):
    torch.manual_seed(7)
    for m in {"gemv": (1, 3), "stream": (1, 13, 40)}.get(config["kernel"], (5, 300)):
        x, _, weight_q, weight_scale, b = make_problem(m, 1000, 1040, dtype, True, "cuda")
        check_linear(x, weight_q, weight_scale, b, f"{config} {dtype} M={m}", config=config)


def _quantized_mlp():
    import quantkit

    # ReLU: exact in eager and in Inductor's code alike, so compiled and eager outputs can be compared bit for bit.
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 200)).cuda().bfloat16()
    quantkit.quantize_(model, "fp8-block")
    assert type(model[0]).__name__ == "Fp8BlockLinear"
    return model


@pytest.mark.gpu
def test_layer_compiles_fullgraph_gpu():
    torch.manual_seed(5)
    model = _quantized_mlp()
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        for m in (1, 300):
            x = torch.randn(m, 256, device="cuda", dtype=torch.bfloat16)
            assert torch.equal(compiled(x), model(x)), f"compiled output differs at M={m}"


@pytest.mark.gpu
def test_layer_in_cuda_graph_gpu():
    torch.manual_seed(6)
    model = _quantized_mlp()
    with torch.no_grad():
        for m in (1, 16, 300):  # the fused decode kernels and the quantize-then-GEMM path
            static_x = torch.randn(m, 256, device="cuda", dtype=torch.bfloat16)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):  # compile and pick configs before capturing
                    model(static_x)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_y = model(static_x)
            fresh = torch.randn(m, 256, device="cuda", dtype=torch.bfloat16)
            static_x.copy_(fresh)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(static_y, model(fresh)), f"graph replay differs from eager at M={m}"


# --------------------------------------------------------------------------- cuBLAS GEMM config
def test_cublas_config_falls_back_to_triton_off_cuda(kernel_device):
    """Where cuBLAS cannot run (here: the interpreter's CPU tensors) the config still computes the layer."""
    if kernel_device == "cuda":
        pytest.skip("the CPU path of the config")
    torch.manual_seed(11)
    x, _, weight_q, weight_scale, b = make_problem(20, 64, 256, torch.float32, True, kernel_device)
    check_linear(x, weight_q, weight_scale, b, "cublas config on CPU", config=fk._cublas())
    x_q, x_s = fk.quantize_act(x)
    y = fk.gemm(x_q, x_s, weight_q, weight_scale, b, torch.float32, config=fk._cublas())
    ref, abs32 = reference32(x_q, x_s, weight_q, weight_scale, b)
    assert_gemm_close(y, ref, abs32, "gemm with the cublas config")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cublas_config_gpu(dtype):
    """cuBLAS's block-scaled GEMM after our quantization: within the same bound as the Triton GEMMs at
    every M (where cuBLAS refuses a problem — M not a multiple of 4 — or the bias, Triton runs), and
    capturable in a CUDA graph."""
    torch.manual_seed(12)
    for m in (17, 20, 128, 300, 1024):
        for bias in (False, True):
            x, _, weight_q, weight_scale, b = make_problem(m, 1024, 2048, dtype, bias, "cuda")
            check_linear(x, weight_q, weight_scale, b, f"cublas {dtype} M={m} bias={bias}", config=fk._cublas())
    x, _, weight_q, weight_scale, b = make_problem(256, 4096, 4096, dtype, False, "cuda")
    y = fk.linear(x, weight_q, weight_scale, config=fk._cublas())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y_graph = fk.linear(x, weight_q, weight_scale, config=fk._cublas())
    g.replay()
    torch.testing.assert_close(y_graph, y, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("split", [1, 2])
def test_swap_pdl_equals_plain_launch_and_replays_in_a_graph_gpu(split):
    """PDL changes when the GEMM (and the split-K sum) start, not what they compute: bit-identical to
    the plain launches, eagerly and replayed from a CUDA graph."""
    torch.manual_seed(11)
    x, _, weight_q, weight_scale, b = make_problem(128, 4096, 4096, torch.bfloat16, True, "cuda")
    plain = fk._swap(64, 64, 2, 4, 3, False, split_k=split)
    pdl = fk._swap(64, 64, 2, 4, 3, False, split_k=split, pdl=True)
    want = fk.linear(x, weight_q, weight_scale, b, config=plain)
    assert torch.equal(fk.linear(x, weight_q, weight_scale, b, config=pdl), want)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = fk.linear(x, weight_q, weight_scale, b, config=pdl)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, want)


def test_cublas_out_of_memory_is_raised_and_not_remembered_as_a_refusal(monkeypatch):
    """cuBLAS refusing a problem is remembered (the Triton GEMM runs it from then on); running out of memory is
    not a property of the problem: it reaches the caller, and the next call tries cuBLAS again."""
    from quantkit.kernels import fp8_block as fb

    x_q = torch.zeros(8, 256, dtype=torch.float8_e4m3fn)
    w_q = torch.zeros(128, 256, dtype=torch.float8_e4m3fn)
    x_s, w_s = torch.ones(8, 2), torch.ones(1, 2)
    y = torch.empty(8, 128, dtype=torch.bfloat16)
    monkeypatch.setattr(fb, "_CUBLAS_REFUSED", set())

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(torch, "_scaled_mm", oom)
    with pytest.raises(torch.OutOfMemoryError):
        fb._try_cublas(x_q, x_s, w_q, w_s, None, y)
    assert fb._CUBLAS_REFUSED == set()

    def refuse(*args, **kwargs):
        raise RuntimeError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmul")

    monkeypatch.setattr(torch, "_scaled_mm", refuse)
    assert fb._try_cublas(x_q, x_s, w_q, w_s, None, y) is False
    assert fb._CUBLAS_REFUSED == {(8, 128, 256, torch.bfloat16)}
