"""int4 weight-only (A16W4) Triton kernels against quantkit.reference.int4.

On the CPU the kernels run in Triton's interpreter at small, odd shapes: every kernel (small-M
tensor-core kernel, GEMV, tile kernel with the scale in the tile or after it, split-K, dequantize +
GEMM) and every activation dtype. The interpreter cannot run inline PTX, so the PTX that dequantizes
on the GPU is checked here by emulating its instructions on random words, and a subprocess compiles
the GPU variants for sm_90 with ptxas (no GPU needed). The ``gpu`` tests run the Llama shapes of
PERFORMANCE.md, every kernel variant, torch.compile and a CUDA graph.

Tolerance (derived, per output i): |y - ref| <= ulp_out(ref) + 1e-5·rms(ref) + 2^-23·S·sigma_i with
sigma_i = sqrt(sum_k x_k² W_k²) the scale of the partial sums. The first term is the output's own
rounding (the interpreter truncates float32 -> bf16 instead of rounding: one ulp covers both); the
second float32 summation order near zero. The third is the tensor cores' float32 accumulation,
which truncates instead of rounding: each of the S accumulation steps can lose one ulp of the
running sum, < 2^-23·|S_t|, and the running sums of a product of random signs stay within ~sigma_i.
A path that carries the accumulator through all of K in the tensor cores (weight rounded in the
tile: ``SCALE_IN``, and cuBLAS after ``dequant_mm``) has S = K/16 steps: at K = 14336 that is
896·2^-23 ≈ 1.1e-4 of sigma, about 2.6e-4 absolute for the test's N(0,1) x and N(0, 0.02²) W (the
round-1 failure was 4e-5 on outputs near 0.001, beyond the 3.2e-5 the old bound allowed). Paths
that start a fresh dot per group chunk and scale it in float32 have S = sqrt(K·DK)/16 (chunks of
DK <= 128 columns, errors of independent chunks adding up at most like sqrt(#chunks)). A wrong code
in one weight moves an output by |x|·s ≈ 5e-3, far beyond either. Paths that multiply by the weight
rounded to the activation dtype are compared with a reference that rounds it the same way.
"""
import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from quantkit.reference import int4 as R
from tests.helpers import rel_error

k4 = pytest.importorskip("quantkit.kernels.int4_weight_only")

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
_FRACTION_BITS = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}


# --------------------------------------------------------------------------- helpers
def make_problem(m, n, k, g, dtype, device, scale_dtype=None, bias=False, symmetric=False):
    w = torch.randn(n, k, device=device) * 0.02
    packed, scale, zero = R.quantize_weight_int4(w.to(dtype), g, symmetric, scale_dtype or dtype)
    x = torch.randn(m, k, device=device).to(dtype)
    b = (torch.randn(n, device=device) * 0.1).to(dtype) if bias else None
    return x, packed, scale, zero, b, w


def ran(config, x, packed, scale, g):
    """The config a call with ``config`` runs: a Gluon GEMM config falls back to ``_fallback_config`` where that
    kernel cannot run, a decode config to the GEMV at M = 1 and the
    default small-M config above where the Gluon decode kernel cannot run, and carries the group size
    where it does (its numerics depend on it: groups smaller than its K chunk round the weight to
    x.dtype)."""
    if config is not None and config["kernel"] == "tma_wgmma":
        from quantkit.kernels import wo_gemm_sm90

        if wo_gemm_sm90.usable_int4(x, packed, scale, g, config["BLOCK_K"]):
            return config
        return k4._fallback_config(x.shape[0], packed.shape[0], x.shape[1])  # (the mma kernel or dequant_mm)
    if config is None or config["kernel"] != "decode":
        return config
    from quantkit.kernels import wo_decode_sm90

    m, k = x.shape
    if x.is_cuda and m <= 16 and wo_decode_sm90.usable(x, packed, scale, g, config):
        return {**config, "_GROUP": g}
    return k4._default_m1_gemv(packed.shape[0]) if m == 1 else k4._default_small(m, packed.shape[0], k)


def rounds_weight(config, x) -> bool:
    """Whether the kernel multiplies by the weight rounded to x.dtype (the tile kernel with SCALE_IN on
    the GPU, the decode kernel with groups smaller than its chunk, and dequant_mm and the Gluon kernel
    everywhere). ``config``: as :func:`ran` returns it."""
    if config is None or x.dtype == torch.float32:
        return False
    if config["kernel"] in ("dequant_mm", "tma_wgmma"):  # the Gluon kernel, or dequant_mm where it cannot run
        return True
    if config["kernel"] == "decode":
        return config["_GROUP"] < config["DK"] or bool(config.get("SCALE_IN", False))
    return x.is_cuda and config["kernel"] == "mma" and bool(config["SCALE_IN"])


def tc_steps(config, k) -> float:
    """S of the module docstring: float32 accumulation steps that may each lose an ulp."""
    if config is not None and (config["kernel"] in ("dequant_mm", "tma_wgmma") or
                               (config["kernel"] == "mma" and bool(config["SCALE_IN"])) or
                               (config["kernel"] == "decode" and config["_GROUP"] < config["DK"])):
        return k / 16
    return math.sqrt(k * 128) / 16


def reference64(x, packed, scale, zero, bias, g, weight_dtype=torch.float32, acc_dtype=torch.float64):
    """(x @ dequantized weight^T (+ bias), sigma) in ``acc_dtype`` (float32 is enough next to a bf16
    output's ulp and much faster at the Llama shapes), returned as float64; sigma_i = sqrt(sum x² W²)."""
    w = R.dequantize_weight_int4(packed, scale, zero, g, weight_dtype).to(acc_dtype)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # a float32 reference must be a float32 GEMM
    try:
        xa = x.to(acc_dtype)
        y = xa @ w.t()
        sigma = ((xa * xa) @ (w * w).t()).sqrt()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    y = y + bias.to(acc_dtype) if bias is not None else y
    return y.double(), sigma.double()


def _ulp(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    _, exp = torch.frexp(ref.abs())
    min_exp = {torch.bfloat16: -125, torch.float16: -13, torch.float32: -125}[dtype]
    return torch.ldexp(torch.ones_like(ref), exp.clamp(min=min_exp) - 1 - _FRACTION_BITS[dtype])


def assert_output(y, ref, what, steps):
    """The bound of the module docstring around the float64 reference ``ref = (values, sigma)``."""
    ref64, sigma = ref
    assert y.shape == ref64.shape and y.dtype in (torch.bfloat16, torch.float16, torch.float32), what
    assert not torch.isnan(y).any(), f"{what}: NaN in output"
    rms = ref64.pow(2).mean().sqrt().item()
    diff = (y.double() - ref64).abs()
    own = 1e-6 * ref64.abs() if y.dtype == torch.float32 else _ulp(ref64, y.dtype)
    bound = own + 1e-5 * rms + 2.0 ** -23 * steps * sigma
    bad = diff > bound
    if bad.any():
        idx = bad.nonzero()[:5]
        rows = [f"  at {tuple(i.tolist())}: got {y[tuple(i)].item():.8g}, reference {ref64[tuple(i)].item():.8g}, "
                f"bound {bound[tuple(i)].item():.3g}" for i in idx]
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} outputs off by more than the bound; "
                             "first:\n" + "\n".join(rows))
    norm_bound = {torch.float32: 1e-5, torch.float16: 5e-4, torch.bfloat16: 6e-3 if INTERPRETED else 3e-3}[y.dtype]
    err = rel_error(y, ref64)
    assert err <= norm_bound, f"{what}: relative error {err:.3g} > {norm_bound}"


def check_config_run(config, m, n, k, g, dtype, device, scale_dtype=None, bias=False, symmetric=False):
    x, packed, scale, zero, b, _ = make_problem(m, n, k, g, dtype, device, scale_dtype, bias, symmetric)
    y = k4.linear(x, packed, scale, zero, b, g, config=config)
    assert y.dtype == dtype and y.shape == (m, n)
    config = ran(config, x, packed, scale, g)
    wdt = dtype if rounds_weight(config, x) else torch.float32
    assert_output(y, reference64(x, packed, scale, zero, b, g, wdt), f"{config} M={m} N={n} K={k} g={g} {dtype}",
                  tc_steps(config, k))
    return y


# --------------------------------------------------------------------------- layout
@pytest.mark.parametrize("shape", [(5, 256), (3, 6), (1, 2), (7, 96)])
def test_pack_roundtrip_and_word_order(shape):
    q = torch.randint(0, 16, shape, dtype=torch.uint8)
    packed = R.pack_int4(q)
    assert packed.dtype == torch.uint8 and packed.shape == (shape[0], shape[1] // 2)
    assert torch.equal(R.unpack_int4(packed), q)
    assert torch.equal(packed[:, :1] & 0xF, q[:, :1]) and torch.equal(packed[:, :1] >> 4, q[:, 1:2])
    if shape[1] % 8 == 0:
        # the int32 view the kernels read: word w holds q[8w + i] in bits 4i..4i+3 (compressed-tensors order)
        words = packed.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
        nibbles = torch.stack([(words >> (4 * i)) & 0xF for i in range(8)], dim=-1).flatten(-2)
        assert torch.equal(nibbles.to(torch.uint8), q)


# --------------------------------------------------------------------------- the PTX, emulated
def _prmt(a, b, sel):
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    out = 0
    for k in range(4):
        n = (sel >> (4 * k)) & 0xF
        assert n < 8, "sign-replicate selectors are not used"
        out |= src[n] << (8 * k)
    return out


def _lop3(a, b, c, lut):
    out = 0
    for bit in range(32):
        idx = (((a >> bit) & 1) << 2) | (((b >> bit) & 1) << 1) | ((c >> bit) & 1)  # a=0xF0 b=0xCC c=0xAA
        out |= ((lut >> idx) & 1) << bit
    return out


def _halves(r, dt):
    h = torch.tensor([r & 0xFFFF, r >> 16], dtype=torch.int32)
    return torch.where(h >= 0x8000, h - 0x10000, h).to(torch.int16).view(dt).double()


def _from_halves(v, dt):
    h = v.to(dt).view(torch.int16).to(torch.int32) & 0xFFFF
    return int(h[0]) | (int(h[1]) << 16)


def run_ptx(text, regs, dt):
    """Execute straight-line conversion PTX (mov, incl. packing {lo, hi}, cvt.u32.u16/and/mul.lo/xor/
    shr/prmt/lop3, and fma.rn/sub.rn/mul.rn on {bf16,f16}x2). Registers hold 32-bit integers; 16-bit pairs are computed exactly in float64 and
    rounded once to ``dt``."""
    env = dict(regs)

    def val(tok):
        return int(tok, 16) if tok.startswith("0x") else int(tok) if tok.isdigit() else env[tok]

    for line in text.splitlines():
        line = line.strip().rstrip(";")
        if not line or line in "{}" or line.startswith(".reg"):
            continue
        op, rest = line.split(None, 1)
        if op == "mov.b32" and "{" in rest:  # pack two 16-bit registers, or unpack into two
            if rest.startswith("{"):
                lo, hi, src = [t.strip(" {}") for t in rest.split(",")]
                env[lo], env[hi] = env[src] & 0xFFFF, (env[src] >> 16) & 0xFFFF
            else:
                dst, lo, hi = [t.strip(" {}") for t in rest.split(",")]
                env[dst] = (env[lo] & 0xFFFF) | ((env[hi] & 0xFFFF) << 16)
            continue
        d, *a = [t.strip() for t in rest.split(",")]
        if op == "mov.b32":
            env[d] = val(a[0])
        elif op == "cvt.u32.u16":
            env[d] = val(a[0]) & 0xFFFF
        elif op == "and.b32":
            env[d] = val(a[0]) & val(a[1])
        elif op == "mul.lo.u32":
            env[d] = (val(a[0]) * val(a[1])) & 0xFFFFFFFF
        elif op == "xor.b32":
            env[d] = val(a[0]) ^ val(a[1])
        elif op == "shr.b32":
            env[d] = (val(a[0]) & 0xFFFFFFFF) >> val(a[1])
        elif op == "prmt.b32":
            env[d] = _prmt(val(a[0]), val(a[1]), val(a[2]))
        elif op == "lop3.b32":
            env[d] = _lop3(val(a[0]), val(a[1]), val(a[2]), val(a[3]))
        elif op in ("fma.rn.bf16x2", "fma.rn.f16x2"):
            # exact a*b+c in float64 (16-bit operands), one rounding to the 16-bit type
            env[d] = _from_halves(_halves(val(a[0]), dt) * _halves(val(a[1]), dt) + _halves(val(a[2]), dt), dt)
        elif op in ("sub.rn.bf16x2", "sub.rn.f16x2"):
            env[d] = _from_halves(_halves(val(a[0]), dt) - _halves(val(a[1]), dt), dt)
        elif op in ("mul.rn.bf16x2", "mul.rn.f16x2"):
            env[d] = _from_halves(_halves(val(a[0]), dt) * _halves(val(a[1]), dt), dt)
        else:
            raise AssertionError(f"unexpected instruction {op}")
    return env


def _bits16(v, dt):
    return int(torch.tensor([v], dtype=torch.float64).to(dt).view(torch.int16)) & 0xFFFF


def _expected16(q, z, s, dt, scale):
    return float(torch.tensor([(q - z) * (s if scale else 1.0)], dtype=torch.float64).to(dt))


@pytest.mark.parametrize("fp16", [False, True], ids=["bf16", "fp16"])
@pytest.mark.parametrize("scale", [False, True], ids=["sub", "scale"])
def test_ptx_dequant_words_emulated(fp16, scale):
    """Tile and dequantize kernels: output j = codes (2j, 2j+1) - z (times s), one rounding."""
    dt = torch.float16 if fp16 else torch.bfloat16
    magic = 0x6400 if fp16 else 0x4300
    text = k4._asm_dequant(fp16, scale)
    gen = torch.Generator().manual_seed(1)
    for _ in range(64):
        word = int(torch.randint(0, 2**32, (1,), generator=gen, dtype=torch.int64))
        z = int(torch.randint(0, 16, (1,), generator=gen))
        s = float(((torch.rand(1, generator=gen) - 0.5) * 0.2).to(dt))
        env = run_ptx(text, {"$4": word, "$5": word, "$6": (magic | z) * 0x10001, "$7": _bits16(s, dt) * 0x10001}, dt)
        for j in range(4):
            got = _halves(env[f"${j}"], dt).tolist()
            want = [_expected16((word >> (4 * (2 * j + e))) & 0xF, z, s, dt, scale) for e in range(2)]
            assert got == want, f"word {word:#010x} z={z} s={s} output {j}: {got} != {want}"


@pytest.mark.parametrize("fp16", [False, True], ids=["bf16", "fp16"])
def test_ptx_pairs_emulated(fp16):
    """Small-M kernel: output j = codes (j, j+4) - z exactly, with $6 = -(magic + z) as the kernel
    builds it (``z | 0xC300`` / ``z | 0xE400`` as 16-bit floats)."""
    dt = torch.float16 if fp16 else torch.bfloat16
    neg_magic = 0xE400 if fp16 else 0xC300
    text = k4._asm_pairs(fp16)
    gen = torch.Generator().manual_seed(3)
    for _ in range(64):
        word = int(torch.randint(0, 2**32, (1,), generator=gen, dtype=torch.int64))
        z = int(torch.randint(0, 16, (1,), generator=gen))
        env = run_ptx(text, {"$4": word, "$5": word, "$6": (neg_magic | z) * 0x10001}, dt)
        for j in range(4):
            got = _halves(env[f"${j}"], dt).tolist()
            want = [float(((word >> (4 * (j + 4 * e))) & 0xF) - z) for e in range(2)]
            assert got == want, f"word {word:#010x} z={z} output {j}: {got} != {want}"


# --------------------------------------------------------------------------- kernels (interpreter on the CPU)
SMALL_CASES = [
    # (m, n, k, g, dtype, scale dtype, bias, config)
    (1, 123, 256, 32, torch.bfloat16, None, True, k4._small(16, 4, 4, 2)),  # N not a multiple of the tile
    (1, 37, 384, 128, torch.float16, None, False, k4._small(32, 4, 2, 2)),  # 3 chunks: CHUNKS falls to 1
    (3, 70, 512, 64, torch.float32, None, True, k4._small(16, 8, 4, 3)),  # 2 chunks a warp, fp32
    (5, 50, 512, 256, torch.bfloat16, torch.float16, False, k4._small(16, 4, 4, 2)),  # g = 256: 2 chunks a group
    (16, 40, 256, 64, torch.bfloat16, None, True, k4._small(32, 2, 2, 2)),
    (20, 33, 128, 32, torch.float16, torch.float32, True, k4._small(16, 4, 4, 2)),  # M > 16: 2 m-tiles
]


@pytest.mark.parametrize("case", SMALL_CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-g{c[3]}-{str(c[4])[6:]}")
def test_small(kernel_device, case):
    m, n, k, g, dtype, sdtype, bias, config = case
    check_config_run(config, m, n, k, g, dtype, kernel_device, sdtype, bias)


GEMV_CASES = [
    (1, 123, 256, 32, torch.bfloat16, None, True, k4._gemv(8, 512, 4, 3)),
    (1, 37, 384, 128, torch.float16, None, False, k4._gemv(16, 256, 4, 1)),  # 3 groups in tiles of 2: masked
    (1, 40, 256, 128, torch.float32, None, True, k4._gemv(16, 128, 4, 2)),
]


@pytest.mark.parametrize("case", GEMV_CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-g{c[3]}-{str(c[4])[6:]}")
def test_gemv(kernel_device, case):
    m, n, k, g, dtype, sdtype, bias, config = case
    check_config_run(config, m, n, k, g, dtype, kernel_device, sdtype, bias)


MMA_CASES = [
    (5, 123, 256, 64, torch.bfloat16, None, True, k4._mma(16, 32, 64, 1, 4, 2, False)),
    (17, 70, 256, 128, torch.float16, None, False, k4._mma(16, 32, 64, 2, 4, 2, True)),  # 2 m-tiles, split 2
    (33, 70, 192, 32, torch.float32, None, True, k4._mma(32, 16, 64, 3, 4, 2, True, group_m=2)),  # split 3
    (2, 45, 512, 256, torch.bfloat16, torch.float16, True, k4._mma(16, 64, 128, 4, 4, 2, False)),  # M <= 16: no split
    (1, 77, 128, 64, torch.float16, None, True, k4._mma(16, 64, 128, 2, 4, 2, False)),
]


@pytest.mark.parametrize("case", MMA_CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-g{c[3]}-{str(c[4])[6:]}-"
                         f"{'in' if c[7]['SCALE_IN'] else 'after'}")
def test_mma(kernel_device, case):
    m, n, k, g, dtype, sdtype, bias, config = case
    check_config_run(config, m, n, k, g, dtype, kernel_device, sdtype, bias)


@pytest.mark.parametrize("dtype,sdtype", [(torch.bfloat16, None), (torch.float16, torch.float32),
                                          (torch.float32, torch.bfloat16)])
def test_dequantize_exact(kernel_device, dtype, sdtype):
    """The weight of dequant_mm is (q - z)·s rounded once to the activation dtype, bit for bit."""
    _, packed, scale, zero, _, _ = make_problem(1, 37, 384, 64, dtype, kernel_device, sdtype)
    want = R.dequantize_weight_int4(packed, scale, zero, 64, torch.float32).to(dtype)
    for config in (k4._dequant_mm(16, 128, 4), k4._dequant_mm(32, 512, 4)):  # edge tiles along N and K
        got = k4.dequantize(packed, scale, zero, 64, dtype, config)
        assert got.dtype == dtype and torch.equal(got, want), f"{config} {dtype}"


@pytest.mark.parametrize("m,dtype,bias", [(9, torch.bfloat16, True), (40, torch.float16, False),
                                          (3, torch.float32, True)])
def test_dequant_mm(kernel_device, m, dtype, bias):
    check_config_run(k4._dequant_mm(16, 64, 4), m, 70, 256, 32, dtype, kernel_device, bias=bias)


def test_default_large_m_takes_dequant_mm_only_for_the_largest_problems():
    """dequant_mm (cuBLAS on a dequantized weight, ~90 µs of host a call) from M = 4096 where M·N·K >= 2^36;
    the Gluon kernel's large-M tiles elsewhere past M = 256, with stream-K where the last wave is short."""
    assert k4.default_config(4096, 4096, 4096)["kernel"] == "dequant_mm"
    assert k4.default_config(8192, 14336, 4096)["kernel"] == "dequant_mm"
    for m, n, k in ((4096, 2048, 2048), (2048, 4096, 4096), (300, 14336, 4096), (2048, 512, 2048)):
        config = k4.default_config(m, n, k)
        assert config["kernel"] == "tma_wgmma" and (config["BLOCK_M"], config["BLOCK_N"]) == (256, 128), (m, n, k)
    # 2048 x 512: 32 tiles, cut along K (stream-K's split); 2048 x 4096: 256 tiles, the last wave 124 of 132
    assert k4.default_config(2048, 512, 2048).get("STREAM_K")
    assert not k4.default_config(2048, 4096, 4096).get("STREAM_K")


@pytest.mark.parametrize("m,n,k,g,dtype", [(1, 123, 256, 128, torch.bfloat16), (7, 50, 128, 32, torch.float16),
                                           (260, 36, 128, 64, torch.bfloat16), (1100, 24, 64, 32, torch.float16),
                                           (2100, 40, 128, 64, torch.bfloat16)])
def test_default_configs(kernel_device, m, n, k, g, dtype):
    """config=None: the per-M dispatch (at M = 1 the DIAG decode programs, the GEMV where they cannot run,
    e.g. on the CPU; the small kernel to 16, the Gluon kernel above: where it cannot run, the mma kernel below
    512 rows and dequantize + GEMM from there)."""
    x, packed, scale, zero, b, _ = make_problem(m, n, k, g, dtype, kernel_device, bias=True, symmetric=m == 7)
    y = k4.linear(x, packed, scale, zero, b, g)
    config = k4.default_config(m, n, k)
    assert config["kernel"] == ("decode" if m == 1 else "small" if m <= 16 else "tma_wgmma")
    config = ran(k4._fit_group(config, m, n, k, g), x, packed, scale, g)
    wdt = dtype if rounds_weight(config, x) else torch.float32
    assert_output(y, reference64(x, packed, scale, zero, b, g, wdt), f"default M={m}", tc_steps(config, k))


@pytest.mark.parametrize("m,n,k,g,dtype", [(12, 40, 256, 32, torch.bfloat16), (16, 24, 128, 64, torch.float16)])
def test_a_smaller_group_runs_the_refitted_config(kernel_device, monkeypatch, m, n, k, g, dtype):
    """config=None at a group under 128: the config fitted to the group (the decode kernel in the place of the small
    kernel at 4 < M <= 16; where it cannot run, as on the CPU, the default small-M config); a config passed in runs
    as given."""
    x, packed, scale, zero, b, _ = make_problem(m, n, k, g, dtype, kernel_device, bias=True)
    y = k4.linear(x, packed, scale, zero, b, g)
    config = k4._fit_group(k4.default_config(m, n, k), m, n, k, g)
    assert config["kernel"] == "decode"
    config = ran(config, x, packed, scale, g)
    wdt = dtype if rounds_weight(config, x) else torch.float32
    assert_output(y, reference64(x, packed, scale, zero, b, g, wdt), f"group {g} M={m}", tc_steps(config, k))
    monkeypatch.setattr(k4, "_fit_group", lambda *a: pytest.fail("a config passed in was refitted"))
    small = k4._small(16, 4, 4, 4)
    assert torch.equal(k4.linear(x, packed, scale, zero, b, g, config=small),
                       k4.linear(x, packed, scale, zero, b, g, config=dict(small)))


def test_configs_fit_groups_under_128():
    """_fit_group: the tables' configs (chosen at group 128) at smaller groups. The small kernel at 4 < M <= 16 gives
    way to the decode kernel, by N; the Gluon GEMM at groups under 64 gives way to dequant_mm from M = 1024 on
    problems of 2^36 multiply-adds. Everything else, and every config at groups of 128 and more, is kept."""
    fit = k4._fit_group
    small, wide = k4._small(16, 4, 4, 4), k4._small(64, 4, 4, 3)
    assert fit(small, 16, 4096, 4096, 32) == k4._decode(1, 4)
    assert fit(small, 12, 1024, 4096, 64) == k4._decode(1, 8)
    assert fit(wide, 16, 14336, 4096, 32) == k4._decode(4, 4, xpf=False)
    for g in (128, 256):
        assert fit(small, 16, 4096, 4096, g) == small
    assert fit(small, 8, 4096, 4096, 32) == k4._decode(1, 4)
    assert fit(small, 4, 4096, 4096, 32) == small  # (M <= 4: the DIAG entries' sizes)
    tma = k4.default_config(1024, 14336, 4096)
    assert tma["kernel"] == "tma_wgmma" and tma["BLOCK_K"] == 64
    assert fit(tma, 4096, 4096, 4096, 32) == k4._dequant_mm(16, 512, 4)
    assert fit(tma, 1024, 14336, 8192, 16)["kernel"] == "dequant_mm"
    assert fit(tma, 4096, 4096, 4096, 64) == tma  # one group a 64-deep step
    assert fit(tma, 1024, 14336, 4096, 32) == tma  # 2^35.8 multiply-adds: level on the GPU, less host time
    assert fit(tma, 512, 14336, 16384, 32) == tma  # under 1024 rows
    for m, n, k, g in ((16, 4096, 4096, 32), (1024, 14336, 4096, 32), (2048, 4096, 4096, 16)):
        k4._check_config(fit(k4.default_config(m, n, k), m, n, k, g))


def test_m1_default_by_shape():
    """M = 1 without a tuned entry: DIAG decode programs below the lm_head's width, the GEMV at it; both
    among the sweep's candidates."""
    assert k4.default_config(1, 128256, 4096)["kernel"] == "gemv"
    for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (1024, 4096), (123, 256)):
        assert k4.default_config(1, n, k) == k4._decode(1, 1, wm=2, diag=True)
    for n, k in ((128256, 4096), (4096, 4096), (14336, 4096), (4096, 14336), (1024, 4096)):
        assert k4.default_config(1, n, k) in k4.candidate_configs(1, n, k)


def test_strided_activation_rows(kernel_device):
    base = torch.randn(6, 400, device=kernel_device).to(torch.float16)
    x = base[:, 16:272]  # unit stride along K, row stride 400
    _, packed, scale, zero, _, _ = make_problem(1, 40, 256, 64, torch.float16, kernel_device)
    for config in (k4._small(16, 4, 4, 2), k4._mma(16, 32, 64, 1, 4, 2, False), k4._dequant_mm(16, 64, 4)):
        y = k4.linear(x, packed, scale, zero, None, 64, config=config)
        wdt = x.dtype if rounds_weight(config, x) else torch.float32
        assert_output(y, reference64(x, packed, scale, zero, None, 64, wdt), f"strided rows {config['kernel']}",
                      tc_steps(config, 256))
    x1 = base[2:3, 16:272]
    y = k4.linear(x1, packed, scale, zero, None, 64, config=k4._gemv(8, 128, 4, 1))
    assert_output(y, reference64(x1, packed, scale, zero, None, 64), "strided row gemv", tc_steps(None, 256))


def test_rejects_what_it_cannot_take(kernel_device):
    x, packed, scale, zero, _, _ = make_problem(2, 16, 128, 32, torch.bfloat16, kernel_device)
    with pytest.raises(ValueError, match="group_size"):
        k4.linear(x, packed, scale, zero, None, 48)
    with pytest.raises(ValueError, match="weight_packed"):
        k4.linear(x, packed[:, :32], scale, zero, None, 32)
    with pytest.raises(ValueError, match="weight_packed"):
        k4.linear(x, packed.view(torch.int8), scale, zero, None, 32)
    with pytest.raises(ValueError, match="weight_packed"):
        wide = torch.zeros(16, 66, dtype=torch.uint8, device=kernel_device)
        k4.linear(x, wide[:, 2:], scale, zero, None, 32)  # not contiguous
    with pytest.raises(ValueError, match="4-byte"):
        flat = torch.zeros(16 * 64 + 1, dtype=torch.uint8, device=kernel_device)
        k4.linear(x, flat[1:].view(16, 64), scale, zero, None, 32)
    with pytest.raises(ValueError, match="weight_zero_point"):
        k4.linear(x, packed, scale, zero.to(torch.int32), None, 32)
    with pytest.raises(ValueError, match="weight_scale"):
        k4.linear(x, packed, scale[:, :2], zero, None, 32)
    with pytest.raises(ValueError, match="bias"):
        k4.linear(x, packed, scale, zero, torch.zeros(15, device=kernel_device), 32)
    with pytest.raises(TypeError, match="x must be"):
        k4.linear(x.to(torch.int32), packed, scale, zero, None, 32)
    with pytest.raises(ValueError, match="last dimension"):
        k4.linear(torch.randn(128, 2, device=kernel_device).t(), packed, scale, zero, None, 32)
    with pytest.raises(ValueError, match="kernel"):
        k4.linear(x, packed, scale, zero, None, 32, config={"kernel": "magic"})
    with pytest.raises(ValueError, match=">= 16"):
        k4.linear(x, packed, scale, zero, None, 32, config=k4._mma(8, 32, 64, 1, 4, 2, False))
    with pytest.raises(ValueError, match=">= 16"):
        k4.linear(x, packed, scale, zero, None, 32, config=k4._small(8, 4, 4, 2))
    with pytest.raises(ValueError, match="power of two"):
        k4.linear(x, packed, scale, zero, None, 32, config=k4._small(16, 3, 4, 2))


def test_config_space():
    """<= 8 candidates per problem, about 25 distinct configs over the 15 benchmark cells (a sweep's budget;
    round 25 added the x-at-use decode program at M = 1), all valid; decode sizes never run split-K (one
    launch, no workspace)."""
    distinct = set()
    for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
        for m in (1, 16, 128, 1024, 4096):
            cands = k4.candidate_configs(m, n, k)
            assert 1 <= len(cands) <= 8
            for c in cands + [k4.default_config(m, n, k)]:
                k4._check_config(c)
                distinct.add(json.dumps(c, sort_keys=True))
                if m <= 16:
                    assert c["kernel"] in ("small", "gemv", "decode") or c["SPLIT_K"] == 1, c
    assert len(distinct) <= 25, len(distinct)
    assert json.loads(open(os.path.join(os.path.dirname(k4.__file__), "tuned", "int4_weight_only.json")).read()) \
        is not None


_COMPILE_SCRIPT = textwrap.dedent("""
    import sys
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource
    import triton
    from quantkit.kernels import int4_weight_only as k4

    def build(fn, sig, consts, warps, stages):
        div = [a for a in ("x_ptr", "w_ptr", "s_ptr", "z_ptr", "b_ptr", "y_ptr", "ws_ptr", "out_ptr", "N", "KW",
                           "G", "stride_xm") if a in sig]
        attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in div}
        k = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                           options=dict(num_warps=warps, num_stages=stages))
        return k.asm["ptx"]

    def ptrs(dtype, names=("x_ptr", "s_ptr", "b_ptr", "y_ptr")):
        sig = dict(x_ptr="*bf16", w_ptr="*u8", s_ptr="*bf16", z_ptr="*u8", b_ptr="*bf16", y_ptr="*bf16")
        for p in names:
            sig[p] = "*" + dtype
        return sig

    small_c = ["R", "BLOCK_M", "BLOCK_N", "DK", "CHUNKS", "MODE", "HAS_BIAS", "PREFETCH"]
    def small(dtype, bm, bn, chunks, warps, stages, mode):
        sig = {**ptrs(dtype), "M": "i32", "N": "i32", "KW": "i32", "G": "i32", "stride_xm": "i32", "TILES": "i32",
               **{c: "constexpr" for c in small_c}}
        consts = dict(R=1, BLOCK_M=bm, BLOCK_N=bn, DK=128, CHUNKS=chunks, MODE=mode, HAS_BIAS=True, PREFETCH=True)
        return build(k4._small_kernel, sig, consts, warps, stages)

    mma_c = ["GROUP", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "MODE", "SCALE_IN", "DOT_F32", "EVEN_M",
             "USE_WS", "HAS_BIAS"]
    def mma(dtype, bm, bn, bk, warps, stages, mode, scale_in):
        sig = {**ptrs(dtype), "ws_ptr": "*fp32", "M": "i32", "N": "i32", "KW": "i32", "G": "i32", "stride_xm": "i32",
               "TILES": "i32", **{c: "constexpr" for c in mma_c}}
        consts = dict(GROUP=128, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, MODE=mode, SCALE_IN=scale_in,
                      DOT_F32=mode == 0, EVEN_M=bm > 16, USE_WS=bm == 16, HAS_BIAS=True)
        return build(k4._mma_kernel, sig, consts, warps, stages)

    out = {}
    out["small1"] = small("bf16", 1, 16, 8, 8, 4, 1)
    out["small16"] = small("fp16", 16, 32, 8, 8, 3, 2)
    out["small_f32"] = small("fp32", 4, 16, 4, 4, 2, 0)
    out["mma16"] = mma("bf16", 16, 32, 128, 4, 4, 1, False)
    out["mma128"] = mma("fp16", 128, 128, 64, 8, 4, 2, True)
    out["mma_f32"] = mma("fp32", 32, 64, 32, 4, 2, 0, True)
    sig = {**ptrs("bf16"), "N": "i32", "KW": "i32", "G": "i32", "stride_xm": "i32", "TILES": "i32", "magic": "i32",
           **{c: "constexpr" for c in ("GROUP", "BLOCK_N", "GROUPS_PER_TILE", "EVEN_G", "HAS_BIAS", "NUM_STAGES")}}
    out["gemv"] = build(k4._gemv_kernel, sig, dict(GROUP=128, BLOCK_N=8, GROUPS_PER_TILE=8, EVEN_G=True,
                                                   HAS_BIAS=True, NUM_STAGES=3), 4, 3)
    sig = dict(ws_ptr="*fp32", b_ptr="*bf16", y_ptr="*bf16", MN="i32", N="i32", SPLIT_K="constexpr",
               BLOCK="constexpr", HAS_BIAS="constexpr")
    out["reduce"] = build(k4._splitk_reduce_kernel, sig, dict(SPLIT_K=4, BLOCK=1024, HAS_BIAS=True), 4, 1)
    sig = dict(w_ptr="*u8", s_ptr="*bf16", z_ptr="*u8", out_ptr="*bf16", N="i32", KW="i32", G="i32",
               **{c: "constexpr" for c in ("GROUP", "BLOCK_N", "BLOCK_KW", "MODE", "ROUND_BF16")})
    out["dequant"] = build(k4._dequant_kernel, sig, dict(GROUP=128, BLOCK_N=32, BLOCK_KW=32, MODE=1,
                                                         ROUND_BF16=False), 4, 1)
    checks = {
        "small1": ["mma.sync", "lop3.b32", "fma.rn.bf16x2", "cp.async", "prefetch.global.L1"],
        "small16": ["mma.sync", "fma.rn.f16x2", "cp.async"],
        "small_f32": ["fma.rn.f32"],
        "mma16": ["mma.sync", "prmt.b32", "fma.rn.bf16x2"],
        "mma128": ["wgmma", "fma.rn.f16x2"],
        "mma_f32": ["fma.rn.f32"],
        "gemv": ["cp.async", "ld.global"],
        "reduce": ["st.global"],
        "dequant": ["prmt.b32", "fma.rn.bf16x2", "st.global.v4"],
    }
    for name, needles in checks.items():
        for needle in needles:
            if needle not in out[name]:
                sys.exit(f"{name}: {needle!r} not in the PTX")
    print("ok")
""")


@pytest.mark.slow
def test_gpu_variants_compile_for_sm90():
    """ptxas (shipped with triton) accepts every GPU variant, PTX included: no GPU needed."""
    try:
        import triton.backends.nvidia  # noqa: F401
    except ImportError:
        pytest.skip("triton has no NVIDIA backend here")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], env=env, cwd=root, capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0 and ("ptxas" in proc.stderr and "not found" in proc.stderr):
        pytest.skip("ptxas is not available")
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-2000:] + proc.stderr[-4000:]


# --------------------------------------------------------------------------- GPU: shapes, variants, compile, graph
LLAMA = [(4096, 4096), (14336, 4096), (4096, 14336)]


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", LLAMA)
def test_real_shapes_gpu(n, k):
    from quantkit.kernels.tuning import get_config

    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    packed, scale, zero = R.quantize_weight_int4(w, 128, False, torch.bfloat16)
    exact_w = w.double()
    for m in (1, 16, 128, 1024):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        y = k4.linear(x, packed, scale, zero, None, 128)  # tuned or default config, as the layer runs it
        config = ran(get_config(k4.FAMILY, m, n, k, module=k4), x, packed, scale, 128)  # what ran (memoized)
        wdt = x.dtype if rounds_weight(config, x) else torch.float32
        ref = reference64(x, packed, scale, zero, None, 128, wdt, acc_dtype=torch.float32)
        assert_output(y, ref, f"M={m} N={n} K={k} {config}", tc_steps(config, k))
        ref = R.int4_weight_only_linear(x, packed, scale, zero, None, 128)
        exact = F.linear(x.double(), exact_w)
        err, ref_err = rel_error(y, exact), rel_error(ref, exact)
        assert err <= ref_err * 1.02 + 1e-4, f"M={m} N={n} K={k}: error {err:.5f} > reference's {ref_err:.5f}"


@pytest.mark.gpu
def test_every_kernel_variant_gpu():
    """Every candidate config (same specializations as the sweep: N, K divisible by 16, no bias, bf16)
    against the reference; the PTX dequantization must match the float32 one bit for bit where both
    feed the same dot (tile kernel) or produce the weight (dequantize)."""
    n, k = 512, 4096
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    packed, scale, zero = R.quantize_weight_int4(w, 128, False, torch.bfloat16)
    seen, compared = set(), set()
    for m_bucket in (1, 16, 32, 128, 1024):  # (at 32 the Triton tile kernel is still a candidate)
        m = {128: 100, 32: 27, 16: 13}.get(m_bucket, m_bucket)  # partial M tiles too
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        ref32 = reference64(x, packed, scale, zero, None, 128)
        ref_rounded = reference64(x, packed, scale, zero, None, 128, torch.bfloat16)
        for c in k4.candidate_configs(m_bucket, n, k):
            key = json.dumps(c, sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            y = k4.linear(x, packed, scale, zero, None, 128, config=c)
            used = ran(c, x, packed, scale, 128)
            assert_output(y, ref_rounded if rounds_weight(used, x) else ref32, f"config {c} M={m}",
                          tc_steps(used, k))
            kind = (c["kernel"], c.get("SCALE_IN"))
            if c["kernel"] == "mma" and kind not in compared:
                compared.add(kind)
                y_f32 = k4.linear(x, packed, scale, zero, None, 128, config={**c, "ASM": False})
                assert torch.equal(y, y_f32), f"PTX and float32 dequantization differ, config {c} M={m}"
            if c["kernel"] == "small" and "small" not in compared:
                compared.add("small")  # float32 CUDA-core dot: same values, other rounding
                y_f32 = k4.linear(x, packed, scale, zero, None, 128, config={**c, "ASM": False})
                assert_output(y_f32, ref32, f"config {c} ASM=False M={m}", tc_steps(c, k))
            if c["kernel"] == "dequant_mm" and "dequant" not in compared:
                compared.add("dequant")
                want = R.dequantize_weight_int4(packed, scale, zero, 128, torch.float32).to(torch.bfloat16)
                for asm in (True, False):
                    got = k4.dequantize(packed, scale, zero, 128, torch.bfloat16, {**c, "ASM": asm})
                    assert torch.equal(got, want), f"dequantize ASM={asm} {c}"
    assert {("mma", False), ("mma", True), "dequant", "small"} <= compared, compared


@pytest.mark.gpu
def test_decode_sizes_allocate_only_the_output_gpu():
    """M <= 16 (default and candidate configs): one allocation per call, the output (no workspace)."""
    n, k = 4096, 4096
    _, packed, scale, zero, _, _ = make_problem(1, n, k, 128, torch.bfloat16, "cuda")
    for m in (1, 16):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        for c in k4.candidate_configs(m, n, k) + [None]:
            k4.linear(x, packed, scale, zero, None, 128, config=c)  # compile, fill caches
            torch.cuda.synchronize()
            before = torch.cuda.memory_stats()["allocation.all.allocated"]
            k4.linear(x, packed, scale, zero, None, 128, config=c)
            after = torch.cuda.memory_stats()["allocation.all.allocated"]
            assert after - before == 1, f"M={m} {c}: {after - before} allocations"


_TILE_IN = k4._mma(64, 128, 64, 1, 4, 4, True)
_DTYPE_CASES = {  # (m, n, k, group, config): odd N and M, the dispatch's choice and a forced variant
    "fp16": [(1, 4000, 1536, 32, None), (77, 1030, 512, 64, _TILE_IN), (5, 1030, 768, 256, None),
             (1100, 520, 512, 128, None)],
    "fp32": [(1, 4000, 1536, 32, None), (300, 333, 1024, 256, None), (9, 100, 512, 64, None),
             (1100, 200, 256, 128, None)],
    "bf16-fp16scale": [(5, 1000, 768, 128, None), (77, 1030, 512, 64, _TILE_IN), (1, 1000, 768, 128, None)],
}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,sdtype,name", [(torch.float16, torch.float16, "fp16"),
                                               (torch.float32, torch.float32, "fp32"),
                                               (torch.bfloat16, torch.float16, "bf16-fp16scale")])
def test_dtypes_odd_shapes_gpu(dtype, sdtype, name):
    for m, n, k, g, config in _DTYPE_CASES[name]:
        x, packed, scale, zero, b, w = make_problem(m, n, k, g, dtype, "cuda", sdtype, bias=True)
        y = k4.linear(x, packed, scale, zero, b, g, config=config)
        exact = F.linear(x.double(), w.to(dtype).double(), b.double())
        ref = R.int4_weight_only_linear(x, packed, scale, zero, b, g)
        err, ref_err = rel_error(y, exact), rel_error(ref, exact)
        assert err <= ref_err * 1.02 + 1e-4, f"{config} M={m} N={n} K={k}: {err:.5f} > {ref_err:.5f}"
        used = ran(config or k4.default_config(m, n, k), x, packed, scale, g)
        # the tile kernel with SCALE_IN rounds an fp16 scale to bf16 before the product: compare bit
        # bounds only where the kernel's weight and the reference's agree
        if not (rounds_weight(used, x) and used["kernel"] == "mma" and sdtype != dtype):
            wdt = dtype if rounds_weight(used, x) else torch.float32
            assert_output(y, reference64(x, packed, scale, zero, b, g, wdt), f"{config} M={m} N={n} K={k}",
                          tc_steps(used, k))


def _small_model():
    import quantkit

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 128, bias=False))
    model = model.to("cuda", torch.bfloat16).eval()
    quantkit.quantize_(model, "int4-weight-only")
    return model


@pytest.mark.gpu
def test_layer_compiles_fullgraph_gpu():
    from quantkit.layers import Int4WeightOnlyLinear
    from quantkit.ops.dispatch import backend_report

    model = _small_model()
    assert isinstance(model[0], Int4WeightOnlyLinear)
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        for m in (1, 16, 77, 1030):
            x = torch.randn(m, 256, device="cuda", dtype=torch.bfloat16)
            assert torch.equal(compiled(x), model(x))
    assert backend_report()[("int4_weight_only.linear", "cuda:0")][0] == "triton"


@pytest.mark.gpu
def test_layer_in_cuda_graph_gpu():
    model = _small_model()
    for m in (1, 16, 1030):
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
                if m <= 16:  # our kernels: the same launches, bit for bit
                    assert torch.equal(static_y, model(new_x))
                else:  # dequantize + cuBLAS, which may pick another algorithm under capture
                    torch.testing.assert_close(static_y, model(new_x), rtol=2e-2, atol=2e-3)


@pytest.mark.gpu
def test_gpu_shipped_decode_size_configs_are_correct():
    """Each config of this GPU's shipped table at M <= 64 (the lm_head's width aside: a float64 reference
    there is 4 GB) on its own problem, M = the bucket, bf16 x, group 128, a bias."""
    from quantkit.kernels import tuning

    ran_any = False
    for key, cfg in tuning._shipped(k4.FAMILY).items():
        m, n, k = (int(v) for v in key.split(","))
        if m > 64 or n > 32768:
            continue
        x, packed, scale, zero, b, _ = make_problem(m, n, k, 128, torch.bfloat16, "cuda", bias=True)
        used = ran(cfg, x, packed, scale, 128)
        y = k4.linear(x, packed, scale, zero, b, 128, config=cfg)
        wdt = x.dtype if rounds_weight(used, x) else torch.float32
        assert_output(y, reference64(x, packed, scale, zero, b, 128, wdt), f"shipped {key} {cfg}", tc_steps(used, k))
        ran_any = True
    if tuning._shipped(k4.FAMILY):
        assert ran_any
