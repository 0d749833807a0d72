"""The reference numerics: quantize/dequantize round trips within the format's rounding bound, exactly."""
import math

import pytest
import torch

from quantkit import reference as R
from quantkit.reference.common import AMAX_EPS


@pytest.mark.parametrize("shape", [(256, 384), (123, 123), (1, 7), (130, 257)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fp8_block_weight_round_trip(shape, dtype):
    w = (torch.randn(shape) * 0.02).to(dtype)
    q, s = R.quantize_weight_fp8_block(w)
    assert q.dtype == torch.float8_e4m3fn and q.shape == w.shape
    assert s.dtype == torch.float32 and s.shape == (math.ceil(shape[0] / 128), math.ceil(shape[1] / 128))
    # Scale per block is exactly amax/448 (a multiplier): the largest code of every block is ±448.
    qb = R.dequantize_weight_fp8_block(q, torch.ones_like(s)).abs()
    for i in range(s.shape[0]):
        for j in range(s.shape[1]):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128].float()
            assert s[i, j].item() == (blk.abs().amax() / 448).item()
            assert qb[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128].max().item() == 448.0
    # e4m3 keeps 3 mantissa bits: each element is off by at most half a step, i.e. 2^-4 of its
    # magnitude (normal range) or half the smallest subnormal step 2^-9 (times the block scale).
    deq = R.dequantize_weight_fp8_block(q, s)
    scale_full = R.dequantize_weight_fp8_block(torch.ones_like(q), s)
    bound = torch.maximum(w.float().abs() * 2.0**-4, scale_full * 2.0**-10) * (1 + 1e-6)
    assert ((deq - w.float()).abs() <= bound).all()


def test_fp8_block_edge_blocks_use_only_their_own_values():
    w = torch.zeros(130, 200)
    w[129, 199] = 3.0  # alone in the bottom-right partial block
    w[0, 0] = 1.0
    q, s = R.quantize_weight_fp8_block(w)
    f32 = lambda v: (torch.tensor(v, dtype=torch.float32) / 448).item()  # noqa: E731
    assert s[1, 1].item() == f32(3.0)
    assert s[0, 0].item() == f32(1.0)
    assert s[0, 1].item() == f32(AMAX_EPS)  # an all-zero block gets the floor, not a NaN
    assert q.float()[129, 199].item() == 448.0 and q.float()[0, 0].item() == 448.0
    assert torch.isfinite(R.dequantize_weight_fp8_block(q, s)).all()


def test_ue8m0_scales_are_powers_of_two_rounded_up():
    s = torch.tensor([1.0, 1.5, 2.0**-20 * 1.0000001, 3e-7, 448.0, 0.7])
    r = R.round_scale_ue8m0(s)
    mant, _ = torch.frexp(r)
    assert (mant == 0.5).all()
    assert (r >= s).all() and (r < 2 * s).all()
    assert r[0] == 1.0 and r[1] == 2.0 and r[4] == 512.0
    w = torch.randn(256, 256)
    q, sc = R.quantize_weight_fp8_block(w, scale_fmt="ue8m0")
    assert (torch.frexp(sc)[0] == 0.5).all()
    assert (q.float().abs().amax() <= 448).all()


@pytest.mark.parametrize("shape", [(5, 123), (3, 384), (1, 1)])
def test_fp8_act_quant_per_token_group(shape):
    x = torch.randn(shape) * 10
    q, s = R.quantize_act_fp8_group(x)
    assert s.shape == (shape[0], math.ceil(shape[1] / 128))
    expected = x.abs().view(shape[0], -1).amax(-1) / 448 if shape[1] <= 128 else None
    if expected is not None:
        assert torch.equal(s[:, 0], expected)
    deq = R.dequantize_act_fp8_group(q, s)
    assert ((deq - x).abs() <= torch.maximum(x.abs() * 2.0**-4, s.repeat_interleave(128, 1)[:, :shape[1]] * 2.0**-10)
            * (1 + 1e-6)).all()


def test_fp8_gemm_matches_blockwise_sum():
    """The GEMM's definition: per K block, dot of codes times both scales, summed in float."""
    x = torch.randn(3, 300)
    w = torch.randn(70, 300) * 0.02
    xq, xs = R.quantize_act_fp8_group(x)
    wq, ws = R.quantize_weight_fp8_block(w)
    y = R.fp8_block_gemm(xq, xs, wq, ws, out_dtype=torch.float64)
    manual = torch.zeros(3, 70, dtype=torch.float64)
    for kb in range(3):
        sl = slice(kb * 128, (kb + 1) * 128)
        dot = xq[:, sl].double() @ wq[:, sl].double().t()
        manual += dot * xs[:, kb, None].double() * ws[0, kb].double()
    assert torch.allclose(y, manual, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_int8_per_channel_round_trip(dtype):
    w = (torch.randn(77, 129) * 0.02).to(dtype)
    q, s = R.quantize_weight_int8_per_channel(w)
    assert q.dtype == torch.int8 and s.shape == (77,) and s.dtype == torch.float32
    assert q.abs().amax(1).eq(127).all()  # every row uses the full symmetric range
    assert q.min() >= -127
    deq = R.dequantize_weight_int8(q, s)
    assert ((deq - w.float()).abs() <= s[:, None] / 2 * (1 + 1e-5)).all()


def test_int8_rounding_is_half_to_even():
    x = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5]])
    q, s = R.quantize_act_int8_per_token(x)
    assert s.item() == 1.0
    assert q.tolist() == [[127, 0, 2, 2, 0, -2]]


def test_int8_gemm_is_exact_int32():
    a = torch.randint(-127, 128, (9, 4001), dtype=torch.int8)
    b = torch.randint(-127, 128, (13, 4001), dtype=torch.int8)
    acc = R.int8_gemm_int32(a, b)
    assert acc.dtype == torch.int32
    assert torch.equal(acc.long(), a.long() @ b.long().t())


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("group_size", [32, 64, 128, 256])
def test_int4_round_trip(symmetric, group_size):
    w = torch.randn(48, 512) * 0.02
    packed, scale, zero = R.quantize_weight_int4(w, group_size, symmetric, torch.float32)
    codes = R.unpack_int4(packed)
    assert codes.shape == w.shape and codes.max() <= 15
    assert scale.shape == zero.shape == (48, 512 // group_size)
    if symmetric:
        assert (zero == 8).all()
    deq = R.dequantize_weight_int4(packed, scale, zero, group_size)
    err = (deq - w).abs().view(48, -1, group_size)
    s = scale[..., None]
    # Rounding moves a value by at most half a step; the integer zero-point can shift the grid by up
    # to half a step more at a group's extreme (where the clamp to 0..15 applies).
    assert (err <= s * (1 + 1e-5)).all()
    assert 0.15 < (err / s).mean().item() < 0.35  # uniform rounding error averages a quarter step


def test_int4_pack_layout_round_trips_every_code():
    codes = torch.arange(16, dtype=torch.uint8).repeat(3, 4)  # [3, 64], all 16 codes at odd and even k
    assert torch.equal(R.unpack_int4(R.pack_int4(codes)), codes)
    rand = torch.randint(0, 16, (37, 256), dtype=torch.uint8)
    assert torch.equal(R.unpack_int4(R.pack_int4(rand)), rand)


def test_int4_scale_is_stored_in_scale_dtype_and_used_as_stored():
    w = torch.randn(16, 128, dtype=torch.bfloat16) * 0.02
    packed, scale, zero = R.quantize_weight_int4(w, 128, False)
    assert scale.dtype == torch.bfloat16
    q = R.unpack_int4(packed).float()
    # Codes were chosen against the bf16-rounded scale: re-deriving them from it gives the same.
    again = torch.round(w.float() / scale.float()) + zero.float()
    assert torch.equal(q, again.clamp(0, 15))


@pytest.mark.parametrize("fn,args", [
    (R.quantize_weight_fp8_block, ()), (R.quantize_weight_int8_per_channel, ()),
    (R.quantize_weight_int4, (128, False, torch.bfloat16)),
])
def test_reference_quantizers_run_on_meta(fn, args):
    out = fn(torch.empty(256, 384, device="meta"), *args)
    assert all(t.is_meta for t in out)


def test_int4_rejects_k_not_multiple_of_group():
    with pytest.raises(ValueError, match="not a multiple of group_size"):
        R.quantize_weight_int4(torch.randn(4, 100), 64)
