"""int4 weight-only (A16W4) Triton kernels against quantkit.reference.int4.

On the CPU the kernels run in Triton's interpreter at small, odd shapes: every kernel variant (GEMV,
tensor-core tile with the weight as right or left operand, scale applied in the tile or to the
partial product, split-K) and every activation dtype. The interpreter cannot run inline PTX, so the
PTX that dequantizes on the GPU is checked here by emulating its six instructions on random words,
and a subprocess compiles the GPU variants for sm_90 with ptxas (no GPU needed). The ``gpu`` tests
run the Llama shapes of PERFORMANCE.md, every kernel variant, torch.compile and a CUDA graph.

Tolerances: outputs within one ulp of the output dtype around the float64 product of x and the
dequantized weight (the kernels accumulate in float32 in another order; the interpreter truncates
float32 -> bf16 instead of rounding to nearest, which one ulp also covers). Float32 outputs within
a few float32 rounding errors. Tile variants that scale inside the tile (``SCALE_IN``) multiply by
the weight rounded once to the activation dtype on the GPU, so there the reference takes that
weight.
"""
import json
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


def rounds_weight(config, x) -> bool:
    """Whether the kernel multiplies by the weight rounded to x.dtype (GPU tile kernels with SCALE_IN)."""
    return (x.is_cuda and config is not None and config["kernel"] == "mma" and bool(config["SCALE_IN"])
            and x.dtype != torch.float32)


def reference64(x, packed, scale, zero, bias, g, weight_dtype=torch.float32, acc_dtype=torch.float64):
    """x @ dequantized weight^T (+ bias) in ``acc_dtype`` (float32 is enough next to a bf16 output's ulp
    and much faster at the Llama shapes), returned as float64."""
    w = R.dequantize_weight_int4(packed, scale, zero, g, weight_dtype).to(acc_dtype)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # a float32 reference must be a float32 GEMM
    try:
        y = x.to(acc_dtype) @ w.t()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return (y + bias.to(acc_dtype) if bias is not None else y).double()


def _ulp(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    _, exp = torch.frexp(ref.abs())
    min_exp = {torch.bfloat16: -125, torch.float16: -13, torch.float32: -125}[dtype]
    return torch.ldexp(torch.ones_like(ref), exp.clamp(min=min_exp) - 1 - _FRACTION_BITS[dtype])


def assert_output(y, ref64, what):
    """One output ulp (bf16/fp16) or a few float32 roundings (fp32) around the float64 reference;
    an absolute slack of 1e-5 of the output's RMS covers float32 summation order near zero."""
    assert y.shape == ref64.shape and y.dtype in (torch.bfloat16, torch.float16, torch.float32), what
    assert not torch.isnan(y).any(), f"{what}: NaN in output"
    rms = ref64.pow(2).mean().sqrt().item()
    diff = (y.double() - ref64).abs()
    if y.dtype == torch.float32:
        bound = 1e-6 * ref64.abs() + 1e-5 * rms
    else:
        bound = _ulp(ref64, y.dtype) + 1e-5 * rms
    bad = diff > bound
    if bad.any():
        idx = bad.nonzero()[:5]
        rows = [f"  at {tuple(i.tolist())}: got {y[tuple(i)].item():.8g}, reference {ref64[tuple(i)].item():.8g}"
                for i in idx]
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} outputs off by more than the bound; "
                             "first:\n" + "\n".join(rows))
    norm_bound = {torch.float32: 1e-5, torch.float16: 5e-4, torch.bfloat16: 6e-3 if INTERPRETED else 3e-3}[y.dtype]
    err = rel_error(y, ref64)
    assert err <= norm_bound, f"{what}: relative error {err:.3g} > {norm_bound}"


def check_config_run(config, m, n, k, g, dtype, device, scale_dtype=None, bias=False, symmetric=False):
    x, packed, scale, zero, b, _ = make_problem(m, n, k, g, dtype, device, scale_dtype, bias, symmetric)
    y = k4.linear(x, packed, scale, zero, b, g, config=config)
    assert y.dtype == dtype and y.shape == (m, n)
    wdt = dtype if rounds_weight(config, x) else torch.float32
    assert_output(y, reference64(x, packed, scale, zero, b, g, wdt), f"{config} M={m} N={n} K={k} g={g} {dtype}")
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
    """Execute the straight-line PTX of the dequantization (mov/xor/shr/prmt/lop3/fma.rn.{bf16,f16}x2)."""
    env = dict(regs)

    def val(tok):
        return int(tok, 16) if tok.startswith("0x") else int(tok) if tok.isdigit() else env[tok]

    for line in text.splitlines():
        line = line.strip().rstrip(";")
        if not line or line in "{}" or line.startswith(".reg"):
            continue
        op, rest = line.split(None, 1)
        d, *a = [t.strip() for t in rest.split(",")]
        if op == "mov.b32":
            env[d] = val(a[0])
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
@pytest.mark.parametrize("scale", [False, True], ids=["sub", "scale"])
def test_ptx_dequant_bytes_emulated(fp16, scale):
    dt = torch.float16 if fp16 else torch.bfloat16
    magic = 0x6400 if fp16 else 0x4300
    text = k4._asm_dequant_bytes(fp16, scale)
    gen = torch.Generator().manual_seed(2)
    for _ in range(64):
        word = int(torch.randint(0, 2**32, (1,), generator=gen, dtype=torch.int64))
        zs = torch.randint(0, 16, (4,), generator=gen).tolist()
        ss = ((torch.rand(4, generator=gen) - 0.5) * 0.2).to(dt).double().tolist()
        regs = {"$4": word, "$5": (magic | zs[0]) | ((magic | zs[1]) << 16),
                "$6": (magic | zs[2]) | ((magic | zs[3]) << 16),
                "$7": _bits16(ss[0], dt) | (_bits16(ss[1], dt) << 16),
                "$8": _bits16(ss[2], dt) | (_bits16(ss[3], dt) << 16)}
        env = run_ptx(text, regs, dt)
        for e in range(4):
            byte = (word >> (8 * e)) & 0xFF
            for out, q in ((0, byte & 0xF), (1, byte >> 4)):  # lo -> $0 $1, hi -> $2 $3
                got = _halves(env[f"${2 * out + e // 2}"], dt)[e % 2].item()
                assert got == _expected16(q, zs[e], ss[e], dt, scale), f"byte {e} of {word:#010x}, nibble {out}"


# --------------------------------------------------------------------------- kernels (interpreter on the CPU)
GEMV_CASES = [
    # (m, n, k, g, dtype, scale dtype, bias, config)
    (1, 123, 256, 32, torch.bfloat16, None, True, k4._gemv(8, 512, 1, 4, 3)),
    (1, 37, 384, 128, torch.float16, None, False, k4._gemv(16, 256, 1, 4, 1)),  # 3 groups in tiles of 2: masked
    (3, 70, 192, 64, torch.float32, None, True, k4._gemv(8, 64, 3, 4, 1)),  # split-K 3, grid over M
    (1, 5, 512, 256, torch.bfloat16, torch.float16, False, k4._gemv(4, 512, 2, 4, 2)),
    (2, 40, 256, 128, torch.float32, None, False, k4._gemv(16, 128, 2, 4, 2)),  # split-K 2, fp32
]


@pytest.mark.parametrize("case", GEMV_CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-g{c[3]}-{str(c[4])[6:]}")
def test_gemv(kernel_device, case):
    m, n, k, g, dtype, sdtype, bias, config = case
    check_config_run(config, m, n, k, g, dtype, kernel_device, sdtype, bias)


MMA_CASES = [
    # weight as the right operand (mma.sync at BLOCK_M = 16, wgmma above)
    (5, 123, 256, 64, torch.bfloat16, None, True, k4._mma(16, 32, 64, 1, 4, 2, False)),
    (17, 70, 256, 128, torch.float16, None, False, k4._mma(16, 32, 64, 2, 4, 2, True)),  # 2 m-tiles, split 2
    (33, 70, 192, 32, torch.float32, None, True, k4._mma(32, 16, 64, 3, 4, 2, True, group_m=2)),
    (2, 45, 512, 256, torch.bfloat16, torch.float16, True, k4._mma(16, 64, 128, 2, 4, 2, False)),
    (1, 77, 128, 64, torch.float16, None, True, k4._mma(16, 64, 128, 2, 4, 2, False)),  # M = 1 on the tile path
    # weight as the left operand
    (5, 123, 256, 64, torch.bfloat16, None, True, k4._mma(16, 32, 64, 1, 4, 2, False, True)),
    (17, 70, 256, 128, torch.float16, None, False, k4._mma(16, 64, 128, 2, 4, 2, True, True)),
    (33, 70, 192, 32, torch.float32, None, True, k4._mma(64, 32, 64, 1, 4, 2, True, True)),
    (2, 45, 512, 256, torch.bfloat16, torch.float32, False, k4._mma(16, 16, 64, 4, 4, 2, False, True)),
]


@pytest.mark.parametrize("case", MMA_CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-g{c[3]}-{str(c[4])[6:]}-"
                         f"{'swap' if c[7]['SWAP'] else 'noswap'}-{'in' if c[7]['SCALE_IN'] else 'after'}")
def test_mma(kernel_device, case):
    m, n, k, g, dtype, sdtype, bias, config = case
    check_config_run(config, m, n, k, g, dtype, kernel_device, sdtype, bias)


@pytest.mark.parametrize("m,n,k,g,dtype", [(1, 123, 256, 128, torch.bfloat16), (7, 50, 128, 32, torch.float16),
                                           (260, 36, 128, 64, torch.bfloat16)])
def test_default_configs(kernel_device, m, n, k, g, dtype):
    """config=None: the per-M dispatch (GEMV at M = 1, tiles above, the large-tile config at M > 256)."""
    x, packed, scale, zero, b, _ = make_problem(m, n, k, g, dtype, kernel_device, bias=True, symmetric=m == 7)
    y = k4.linear(x, packed, scale, zero, b, g)
    config = k4.default_config(m, n, k)
    wdt = dtype if rounds_weight(config, x) else torch.float32
    assert_output(y, reference64(x, packed, scale, zero, b, g, wdt), f"default M={m}")


def test_strided_activation_rows(kernel_device):
    base = torch.randn(6, 400, device=kernel_device).to(torch.float16)
    x = base[:, 16:272]  # unit stride along K, row stride 400
    _, packed, scale, zero, _, _ = make_problem(1, 40, 256, 64, torch.float16, kernel_device)
    for config in (k4._gemv(8, 128, 1, 4, 1), k4._mma(16, 32, 64, 1, 4, 2, False)):
        y = k4.linear(x, packed, scale, zero, None, 64, config=config)
        assert_output(y, reference64(x, packed, scale, zero, None, 64), f"strided rows {config['kernel']}")


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


def test_config_space():
    """<= 8 candidates per problem, about 24 distinct configs over the 15 benchmark cells, all valid."""
    distinct = set()
    for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
        for m in (1, 16, 128, 1024, 4096):
            cands = k4.candidate_configs(m, n, k)
            assert 1 <= len(cands) <= 8
            for c in cands + [k4.default_config(m, n, k)]:
                k4._check_config(c)
                distinct.add(json.dumps(c, sort_keys=True))
    assert len(distinct) <= 26
    assert json.loads(open(os.path.join(os.path.dirname(k4.__file__), "tuned", "int4_weight_only.json")).read()) \
        is not None


_COMPILE_SCRIPT = textwrap.dedent("""
    import sys
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource
    import triton
    from quantkit.kernels import int4_weight_only as k4

    def build(fn, sig, consts, warps, stages):
        div = [a for a in ("x_ptr", "w_ptr", "s_ptr", "z_ptr", "b_ptr", "y_ptr", "ws_ptr", "N", "KW", "KB", "G",
                           "stride_xm") if a in sig]
        attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in div}
        k = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                           options=dict(num_warps=warps, num_stages=stages))
        return k.asm["ptx"]

    ptr = dict(x_ptr="*bf16", w_ptr="*u8", s_ptr="*bf16", z_ptr="*u8", b_ptr="*bf16", y_ptr="*bf16",
               ws_ptr="*fp32", M="i32", N="i32")
    tail = dict(G="i32", stride_xm="i32", TILES="i32")
    mma_c = ["GROUP", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "MODE", "SCALE_IN", "DOT_F32", "EVEN_M",
             "USE_WS", "HAS_BIAS"]
    def mma(fn, kw, dtype, bm, bn, bk, warps, stages, mode, scale_in):
        sig = {**ptr, kw: "i32", **tail, **{c: "constexpr" for c in mma_c}}
        for p in ("x_ptr", "b_ptr", "y_ptr", "s_ptr"):
            sig[p] = "*" + dtype
        consts = dict(GROUP=128, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, MODE=mode, SCALE_IN=scale_in,
                      DOT_F32=mode == 0, EVEN_M=bm > 16, USE_WS=bm == 16, HAS_BIAS=True)
        return build(fn, sig, consts, warps, stages)

    out = {}
    out["mma16"] = mma(k4._mma_kernel, "KW", "bf16", 16, 64, 128, 4, 4, 1, False)
    out["mma128"] = mma(k4._mma_kernel, "KW", "fp16", 128, 128, 64, 8, 4, 2, True)
    out["swap128"] = mma(k4._mma_swap_kernel, "KB", "bf16", 128, 128, 64, 8, 4, 1, True)
    out["mma_f32"] = mma(k4._mma_kernel, "KW", "fp32", 32, 64, 32, 4, 2, 0, True)
    sig = {**ptr, "KW": "i32", **tail, "magic": "i32", **{c: "constexpr" for c in (
        "GROUP", "BLOCK_N", "GROUPS_PER_TILE", "EVEN_G", "USE_WS", "HAS_BIAS", "NUM_STAGES")}}
    out["gemv"] = build(k4._gemv_kernel, sig, dict(GROUP=128, BLOCK_N=16, GROUPS_PER_TILE=8, EVEN_G=True,
                                                   USE_WS=False, HAS_BIAS=True, NUM_STAGES=3), 4, 3)
    sig = dict(ws_ptr="*fp32", b_ptr="*bf16", y_ptr="*bf16", MN="i32", N="i32", SPLIT_K="constexpr",
               BLOCK="constexpr", HAS_BIAS="constexpr")
    out["reduce"] = build(k4._splitk_reduce_kernel, sig, dict(SPLIT_K=4, BLOCK=1024, HAS_BIAS=True), 4, 1)
    checks = {
        "mma16": ["mma.sync", "prmt.b32", "fma.rn.bf16x2"],
        "mma128": ["wgmma", "fma.rn.f16x2"],
        "swap128": ["wgmma", "prmt.b32", "fma.rn.bf16x2"],
        "mma_f32": ["fma.rn.f32"],
        "gemv": ["cp.async", "ld.global"],
        "reduce": ["st.global"],
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
    for m in (1, 16, 128, 1024):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        y = k4.linear(x, packed, scale, zero, None, 128)  # tuned or default config, as the layer runs it
        config = get_config(k4.FAMILY, m, n, k, module=k4)  # the config it ran (memoized)
        wdt = x.dtype if rounds_weight(config, x) else torch.float32
        ref = reference64(x, packed, scale, zero, None, 128, wdt, acc_dtype=torch.float32)
        assert_output(y, ref, f"M={m} N={n} K={k} {config}")
        ref = R.int4_weight_only_linear(x, packed, scale, zero, None, 128)
        exact = F.linear(x.double(), w.double())
        err, ref_err = rel_error(y, exact), rel_error(ref, exact)
        assert err <= ref_err * 1.02 + 1e-4, f"M={m} N={n} K={k}: error {err:.5f} > reference's {ref_err:.5f}"


@pytest.mark.gpu
def test_every_kernel_variant_gpu():
    """One config per kernel variant the sweep may pick (same specializations: N, K divisible by 16, no
    bias, bf16), against the reference; for three of them the PTX dequantization must match the float32
    one bit for bit (both round (q - z)·s once, and the dot is the same)."""
    n, k = 512, 4096
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    packed, scale, zero = R.quantize_weight_int4(w, 128, False, torch.bfloat16)
    seen, compared = set(), set()
    for m_bucket in (1, 16, 128, 1024):
        m = 100 if m_bucket == 128 else m_bucket  # partial M tiles too
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        ref32 = reference64(x, packed, scale, zero, None, 128)
        ref_rounded = reference64(x, packed, scale, zero, None, 128, torch.bfloat16)
        for c in k4.candidate_configs(m_bucket, n, k):
            kind = (c["kernel"], c.get("SWAP"), c.get("SCALE_IN"), c.get("BLOCK_M", 1) >= 64)
            if kind in seen:
                continue
            seen.add(kind)
            y = k4.linear(x, packed, scale, zero, None, 128, config=c)
            assert_output(y, ref_rounded if rounds_weight(c, x) else ref32, f"config {c} M={m}")
            if c["kernel"] == "mma" and kind[1:3] not in compared:
                compared.add(kind[1:3])
                y_f32 = k4.linear(x, packed, scale, zero, None, 128, config={**c, "ASM": False})
                assert torch.equal(y, y_f32), f"PTX and float32 dequantization differ, config {c} M={m}"
    assert len(compared) == 4, compared  # both operand orders, scale in the tile and after it


_SWAP_IN = k4._mma(64, 128, 64, 1, 4, 4, True, True)
_DTYPE_CASES = {  # (m, n, k, group, config): odd N and M, the dispatch's choice and a forced variant
    "fp16": [(1, 4000, 1536, 32, None), (77, 1030, 512, 64, _SWAP_IN)],
    "fp32": [(1, 4000, 1536, 32, None), (300, 333, 1024, 256, None)],
    "bf16-fp16scale": [(5, 1000, 768, 128, None), (77, 1030, 512, 64, _SWAP_IN)],
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
        used = config or k4.default_config(m, n, k)
        if not rounds_weight(used, x) or sdtype == dtype:  # bf16 tiles round an fp16 scale to bf16 first
            wdt = dtype if rounds_weight(used, x) else torch.float32
            assert_output(y, reference64(x, packed, scale, zero, b, g, wdt), f"{config} M={m} N={n} K={k}")


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
        for m in (1, 16, 77):
            x = torch.randn(m, 256, device="cuda", dtype=torch.bfloat16)
            assert torch.equal(compiled(x), model(x))
    assert backend_report()[("int4_weight_only.linear", "cuda:0")][0] == "triton"


@pytest.mark.gpu
def test_layer_in_cuda_graph_gpu():
    model = _small_model()
    for m in (1, 16):
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
