"""The Gluon int4 decode kernel for sm_90 (quantkit.kernels.wo_decode_sm90).

Gluon kernels do not run in Triton's interpreter, so on the CPU the inline-PTX word conversions are
emulated instruction by instruction (int4: random words, every zero-point, with and without the
scale; int8: every byte value in every position), the
K permutation the kernel relies on is checked against the mma fragment layout it targets, and every
decode candidate (plus fp16, a bias, group 32 at DK 128, 16 x rows and a ragged K) is compiled for
sm_90 with triton's ptxas: no spills, mma.sync, 16-byte weight loads, and no shared memory or shuffle
between the loads and the mma (the layouts are the fragments: converting them moves no data).
On the GPU: M from 1 to 16, N and K edges, every group size, fp16, a bias, strided rows, every
candidate at a Llama shape, the fallback, and a CUDA graph, against the float64 formula within the
int4 tests' bound.
"""
from __future__ import annotations

import re

import pytest
import torch

from quantkit.kernels import int4_weight_only as k4
from quantkit.reference import int4 as R
from tests.kernels.test_int4_weight_only import (_bits16, _expected16, _halves, assert_output, make_problem, ran,
                                                 reference64, rounds_weight, run_ptx, tc_steps)
from tests.kernels.test_int8_weight_only import _sm90_tools, run_sm90_check


@pytest.mark.parametrize("fp16", [False, True], ids=["bf16", "fp16"])
@pytest.mark.parametrize("scale", [False, True], ids=["sub", "scale"])
def test_word_conversion_ptx_emulated(fp16, scale):
    """Output 2j + e is code 2j + e of the word (byte j's low / high nibble) minus z, times s if
    ``scale``, each rounded once to the 16-bit type."""
    from quantkit.kernels import wo_decode_sm90 as d

    dt = torch.float16 if fp16 else torch.bfloat16
    magic = 1024 if fp16 else 128
    text = d._asm_word(fp16, scale)
    gen = torch.Generator().manual_seed(3)
    for i in range(96):
        word = int(torch.randint(0, 2**32, (1,), generator=gen, dtype=torch.int64))
        z = i % 16
        s = float(((torch.rand(1, generator=gen) - 0.5) * 0.2).to(dt))
        regs = {"$8": word, "$9": _bits16(magic + z, dt), "$10": _bits16(s, dt)}
        env = run_ptx(text, regs, dt)
        for c in range(8):
            got = float(_halves(env[f"${c}"], dt)[0])
            want = _expected16((word >> (4 * c)) & 15, z, s, dt, scale)
            assert got == want, f"word {word:#010x} z={z} code {c}: {got} != {want}"


@pytest.mark.parametrize("fp16", [False, True], ids=["bf16", "fp16"])
def test_int8_word_conversion_ptx_emulated(fp16):
    """int8 words: output j is byte j of the word as a signed integer, exactly, for every byte value in
    every position of the word."""
    from quantkit.kernels import wo_decode_sm90 as d

    dt = torch.float16 if fp16 else torch.bfloat16
    text = d._asm_i8_word(fp16)
    for b in range(256):
        word = b | ((b * 37 + 11) % 256) << 8 | ((b * 101 + 3) % 256) << 16 | ((255 - b) << 24)
        env = run_ptx(text, {"$4": word}, dt)
        for j in range(4):
            byte = (word >> (8 * j)) & 255
            got = float(_halves(env[f"${j}"], dt)[0])
            assert got == float(byte - 256 * (byte >> 7)), f"word {word:#010x} byte {j}: {got}"


def _logical_to_physical(perm, shape, physical, weight):
    """The kernel's renaming applied to a tensor of physical chunk columns: an array whose entries are
    ``physical(*index)`` — [1, 1, *shape] for the weight ([B, BN, ...]), [1, *shape, 1] for x
    ([B, ..., BM]) — permuted by ``perm`` and flattened (as `_permute*` + `reshape` do to the loaded
    values): entry k is the physical column that lands on logical column k."""
    import numpy as np

    values = physical(*np.indices(shape))
    values = values[None, None] if weight else values[None, ..., None]
    return np.transpose(values, perm).reshape(-1)


@pytest.mark.parametrize("fmt,dk", [("int4", 128), ("int4", 64), ("int8", 64), ("int8", 128)])
def test_k_permutation_matches_the_mma_fragments(fmt, dk):
    """The kernel's permutations (``A_PERM_*`` for the weight, ``X_PERM_*`` for x) applied to
    physical column indices: weight and x agree on every logical column; every column appears once;
    each logical pair (2i, 2i + 1) is one 32-bit register as loaded (physical p, p + 1, p even: no
    repacking); and logical column k belongs to lane c = (k mod 8) // 2, the m16n8k16 fragment lane
    that holds columns 2c, 2c + 1, 2c + 8, 2c + 9 of each 16-column step, while physical column p is
    loaded by lane c = p // (DK / 4)."""
    from quantkit.kernels import wo_decode_sm90 as d

    q = dk // 4  # physical columns per lane c
    if fmt == "int4":
        wt = dk // 32
        # weight joined as [c, ω, e, jl, jh] (code 4·jh + 2·jl + e of word ω of slice c); x [c, ω, jh, jl, e]
        w = _logical_to_physical(d.A_PERM_INT4.value, (4, wt, 2, 2, 2),
                                 lambda c, om, e, jl, jh: c * q + 8 * om + 4 * jh + 2 * jl + e, True)
        x = _logical_to_physical(d.X_PERM_INT4.value, (4, wt, 2, 2, 2),
                                 lambda c, om, jh, jl, e: c * q + 8 * om + 4 * jh + 2 * jl + e, False)
    else:
        wt = dk // 16
        # weight joined as [c, ω, e, h] (byte 2·h + e of word ω of slice c); x [c, ω, h, e]
        w = _logical_to_physical(d.A_PERM_INT8.value, (4, wt, 2, 2), lambda c, om, e, h: c * q + 4 * om + 2 * h + e,
                                 True)
        x = _logical_to_physical(d.X_PERM_INT8.value, (4, wt, 2, 2), lambda c, om, h, e: c * q + 4 * om + 2 * h + e,
                                 False)
    assert w.tolist() == x.tolist()
    assert sorted(w.tolist()) == list(range(dk))
    assert all(w[k + 1] == w[k] + 1 and w[k] % 2 == 0 for k in range(0, dk, 2))
    assert all((k % 8) // 2 == w[k] // q for k in range(dk))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8])
def test_tile_weight_puts_each_byte_in_its_tile(dtype):
    """Byte (r, b) of a row-major [N, Kb] weight lands at ((r // 16)·(Kb / C) + b // C)·16·C + (r % 16)·C
    + b % C of the tiled one (the addresses a TILED decode config reads); N or Kb that do not tile are
    refused; the input is left as it was."""
    from quantkit.kernels.wo_decode_sm90 import tile_weight

    n, kb, c = 48, 320, 64
    w = torch.randint(-128 if dtype == torch.int8 else 0, 128, (n, kb), dtype=dtype)
    before = w.clone()
    t = tile_weight(w, c)
    assert t.shape == w.shape and t.dtype == dtype and t.is_contiguous() and torch.equal(w, before)
    r, b = torch.meshgrid(torch.arange(n), torch.arange(kb), indexing="ij")
    at = ((r // 16) * (kb // c) + b // c) * 16 * c + (r % 16) * c + b % c
    assert torch.equal(t.reshape(-1)[at.reshape(-1)].view(n, kb), w)
    with pytest.raises(ValueError, match="multiple of 16"):
        tile_weight(w[:40], c)
    with pytest.raises(ValueError, match="multiple of"):
        tile_weight(w[:, :300], c)


def test_diag_chunks_per_slot():
    """DG for a decode config: 8 / M chunks of a row a slot at M <= 4 with DIAG (M rounded up to a power of
    two), else 1; DIAG with TILED is refused where DIAG applies."""
    from quantkit.kernels.wo_decode_sm90 import diag_chunks

    diag = k4._decode(1, 1, diag=True)
    assert [diag_chunks(diag, m) for m in (1, 2, 3, 4, 5, 16)] == [8, 4, 2, 2, 1, 1]
    assert [diag_chunks(k4._decode(1, 4), m) for m in (1, 2, 4)] == [1, 1, 1]
    with pytest.raises(ValueError, match="DIAG or TILED"):
        diag_chunks(dict(diag, TILED=True), 1)
    assert diag_chunks(dict(diag, TILED=True), 5) == 1
    # DG caps the chunks a slot; the x tile's idle columns still cap it (a DG = 4 entry at M = 3 runs 2)
    assert [diag_chunks(k4._decode(1, 1, diag=True, dg=2), m) for m in (1, 2, 4, 5)] == [2, 2, 2, 1]
    assert [diag_chunks(k4._decode(1, 1, diag=True, dg=4), m) for m in (1, 2, 3)] == [4, 4, 2]
    assert diag_chunks(k4._decode(1, 1, diag=True, dg=8), 1) == 8
    for bad in (1, 3, 16, True, "2", 2.0):
        with pytest.raises(ValueError, match="DG"):
            diag_chunks(dict(diag, DG=bad), 1)
    with pytest.raises(ValueError, match="DG"):  # DG without DIAG is a typo, not a plain config
        diag_chunks(dict(k4._decode(1, 4), DG=2), 1)


def test_scale_in_and_register_cap_keys():
    """SCALE_IN turns on the rounded-weight numerics at any group size (groups under DK always have them; int8
    never does). MAXNREG must be a multiple of 8 in 64..255, refused by name before any launch."""
    from quantkit.kernels import wo_decode_sm90 as d

    plain, si = k4._decode(4, 4, xpf=False), k4._decode(4, 4, xpf=False, scale_in=True)
    assert [d.scale_in(plain, g) for g in (32, 64, 128, 256)] == [True, True, False, False]
    assert [d.scale_in(si, g) for g in (32, 64, 128, 256)] == [True] * 4
    assert not d.scale_in(si, 1, int8=True)
    x, packed, scale, zero, _, _ = make_problem(16, 64, 512, 128, torch.bfloat16, "cpu")
    out = torch.empty(16, 64, dtype=torch.bfloat16)
    for bad in (100, 7, 256, 48.0, True, "168"):
        with pytest.raises(ValueError, match="MAXNREG"):
            d.launch(x, packed, scale, zero, None, out, 128, dict(plain, MAXNREG=bad))


def test_l2_prefetch_key():
    """L2PF, the weight loads' L2 prefetch size: 128 bytes unless a config says 0 (no hint); any other value
    is refused by name before a launch."""
    from quantkit.kernels import wo_decode_sm90 as d

    plain = k4._decode(1, 4)
    assert [d.l2_prefetch(c) for c in (plain, dict(plain, L2PF=0), dict(plain, L2PF=128))] == [128, 0, 128]
    x, packed, scale, zero, _, _ = make_problem(1, 64, 256, 128, torch.bfloat16, "cpu")
    out = torch.empty(1, 64, dtype=torch.bfloat16)
    for bad in (64, 256, True, "128", 128.5):
        with pytest.raises(ValueError, match="L2PF"):
            d.launch(x, packed, scale, zero, None, out, 128, dict(plain, L2PF=bad))


@pytest.mark.parametrize("key", ["DIAG", "TILED", "XPF", "SCALE_IN"])
def test_decode_flags_must_be_bools(key):
    """A tuned table is JSON: a flag read back as 1 or "true" is refused before any launch, naming it."""
    from quantkit.kernels import wo_decode_sm90 as d

    x, packed, scale, zero, _, _ = make_problem(1, 64, 256, 128, torch.bfloat16, "cpu")
    out = torch.empty(1, 64, dtype=torch.bfloat16)
    for bad in (1, "true"):
        with pytest.raises(ValueError, match=key):
            d.launch(x, packed, scale, zero, None, out, 128, dict(k4._decode(1, 4), **{key: bad}))


def _decode_candidates(module) -> list:
    cands = []
    for m in (1, 16):
        for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
            cands += [c for c in module.candidate_configs(m, n, k) + [module.default_config(m, n, k)]
                      if c["kernel"] == "decode" and c not in cands]
    return cands


def _decode_compile_jobs():
    """(config, BM, group (None: int8), dtype, bias, EVEN): every decode candidate of both formats at
    the Llama shapes, and the first with 16 x rows, fp16, a bias, group 32 and 256, a ragged K, and
    one with two row warps per format."""
    from quantkit.kernels import int8_weight_only as k8

    cands = _decode_candidates(k4)
    jobs = [(c, 8, 128, "bf16", False, True) for c in cands]
    jobs += [(cands[0], 16, 128, "fp16", True, True), (cands[0], 8, 32, "bf16", False, True),
             (cands[0], 16, 256, "bf16", True, False), (k4._decode(1, 4, dk=64), 8, 64, "fp16", False, False)]
    cands8 = _decode_candidates(k8)
    jobs += [(c, 8, None, "bf16", False, True) for c in cands8]
    jobs += [(cands8[0], 16, None, "fp16", True, False)]
    # two row warps (no candidate uses them yet): the layouts must still be the mma fragments
    jobs += [(k4._decode(1, 4, wm=2), 16, 128, "bf16", False, True), (k8._decode_config(1, 4, wm=2), 16, None, "bf16", False, True)]
    # DIAG at M = 1 (eight chunks of a row a slot): masked trips, small groups, a bias
    jobs += [(k4._decode(1, 1, diag=True), 8, 32, "fp16", True, False),
             (k8._decode_config(1, 1, diag=True), 8, None, "fp16", True, False)]
    # DIAG with fewer chunks a slot (DG 2 / 4): the same programs over 4 / 2 rows
    jobs += [(k4._decode(1, 1, wm=2, diag=True, dg=2), 8, 128, "bf16", False, True),
             (k4._decode(1, 2, diag=True, dg=4), 8, 64, "fp16", True, False),
             (k8._decode_config(1, 2, diag=True, dg=2), 8, None, "bf16", False, True),
             (k8._decode_config(2, 1, xpf=False, diag=True, dg=4), 8, None, "fp16", True, False)]
    # the weight scaled in the conversion at group >= DK (SCALE_IN), with and without a register cap
    jobs += [(k4._decode(4, 4, xpf=False, scale_in=True), 16, 128, "bf16", True, True),
             (k4._decode(2, 4, scale_in=True), 16, 256, "fp16", False, False)]
    # the weight loads without the L2 prefetch-size hint (all the others carry it): whole and masked trips
    jobs += [(dict(cands[0], L2PF=0), 8, 128, "bf16", False, True),
             (dict(k4._decode(4, 4, xpf=False), L2PF=0), 16, 128, "bf16", True, False),
             (dict(k8._decode_config(2, 4), L2PF=0), 16, None, "fp16", False, False)]
    # the tiled weight layout (16-row tiles): only the addresses change
    jobs += [(dict(cands[0], TILED=True), 8, 128, "bf16", False, True),
             (dict(cands[0], TILED=True), 16, 128, "fp16", True, False),
             (dict(k8._decode_config(1, 4), TILED=True), 8, None, "bf16", False, True)]
    return jobs


def _compile_decode(cfg, bm, group, dtype, bias, even):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from quantkit.kernels import wo_decode_sm90 as d

    fn = d._decode_kernel
    t = f"*{dtype}"
    int8 = group is None
    sig = dict(x_ptr=t, w_ptr="*i8" if int8 else "*u8", s_ptr="*fp32" if int8 else t, z_ptr="*u8", b_ptr=t, y_ptr=t,
               M="i32", N="i32", KW="i32", G="i32", stride_xm="i32", NUM_CHUNKS="i32", TRIPS="i32")
    mt, wk, wm, dk, sub = cfg["MT"], cfg["WK"], cfg["WM"], cfg["DK"], cfg.get("SUB", 1)
    consts = dict(INT8=int8, GROUP=group or 1, DK=dk, BM=bm, MT=mt, WK=wk, WM=wm, SUB=sub, XPF=cfg.get("XPF", True),
                  SCALE_IN=d.scale_in(cfg, group or 1, int8), HAS_BIAS=bias, EVEN=even,
                  W_LAYOUT=d.word_layout(wk, wm, mt, dk // 16 if int8 else dk // 32, sub),
                  X_LAYOUT=d.x_layout(wk, wm, dk, bm, sub), num_warps=wk * wm, TILED=cfg.get("TILED", False),
                  DG=cfg.get("DG", 8) if cfg.get("DIAG", False) and bm == 8 else 1, L2PF=d.l2_prefetch(cfg))
    sig.update({k: "constexpr" for k in consts})
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]]
             for a in ("x_ptr", "w_ptr", "s_ptr", "z_ptr", "b_ptr", "y_ptr", "N", "KW", "stride_xm")}
    options = dict(num_warps=wk * wm)
    if cfg.get("MAXNREG"):
        options["maxnreg"] = cfg["MAXNREG"]
    return triton.compile(GluonASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32), options=options)


def _decode_check_main() -> None:
    """Compile every job of :func:`_decode_compile_jobs` for sm_90; print a line each, 'ok' last."""
    from quantkit.kernels import wo_decode_sm90 as d

    failures = []
    for cfg, bm, group, dtype, bias, even in _decode_compile_jobs():
        kernel = _compile_decode(cfg, bm, group, dtype, bias, even)
        info, _ = _sm90_tools(kernel)
        spills = int(re.search(r"(\d+) bytes spill stores", info).group(1))
        regs = int(re.search(r"Used (\d+) registers", info).group(1))
        ptx = kernel.asm["ptx"]
        loop = ptx[:ptx.rindex("mma.sync")]  # everything up to the last mma: loads, conversions, mmas
        moves_nothing = "st.shared" not in loop and "shfl.sync" not in loop and "ld.shared" not in loop
        vector_loads = "ld.global.L1::evict_first.v4" in ptx or "ld.global.v4" in ptx
        # the weight loads carry the config's L2 prefetch size, as vectors of a thread's words of a row slice
        # (WT = 2: 8 bytes; else 16)
        l2pf = d.l2_prefetch(cfg)
        vec = min(4, cfg["DK"] // (16 if group is None else 32))
        hinted = (f"ld.global.L1::evict_first.L2::{l2pf}B.v{vec}.b32" in ptx and ptx.count(".L2::128B.v") ==
                  ptx.count(f".L2::128B.v{vec}.b32")) if l2pf else ".L2::128B" not in ptx
        what = f"decode {cfg} BM={bm} g={group} {dtype} bias={bias} even={even}"
        print(f"{what}: regs={regs} spills={spills} mma={'mma.sync' in ptx} moves_nothing={moves_nothing} "
              f"v4={vector_loads} l2pf={l2pf}:{hinted}")
        if spills or "mma.sync" not in ptx or not moves_nothing or not vector_loads or not hinted:
            failures.append(what)
    if failures:
        print("FAILED:", failures)
        raise SystemExit(1)
    print("ok")


def test_decode_candidates_compile_for_sm90():
    run_sm90_check("from tests.kernels.test_wo_decode_sm90 import _decode_check_main; _decode_check_main()")


# --------------------------------------------------------------------------- GPU
def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


def _check(config, m, n, k, g, dtype, bias=False, x=None, what=""):
    xx, packed, scale, zero, b, _ = make_problem(m, n, k, g, dtype, "cuda", bias=bias)
    x = xx if x is None else x
    used = ran(config, x, packed, scale, g)
    assert used["kernel"] == "decode", f"{what}: the decode kernel should run, fell back to {used}"
    y = k4.linear(x, packed, scale, zero, b, g, config=config)
    wdt = dtype if rounds_weight(used, x) else torch.float32
    assert_output(y, reference64(x, packed, scale, zero, b, g, wdt), f"{what} {config} M={m} N={n} K={k} g={g}",
                  tc_steps(used, k))
    assert torch.equal(y, k4.linear(x, packed, scale, zero, b, g, config=config)), f"{what}: not deterministic"
    return y


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize("m", [1, 2, 3, 8, 9, 16])
def test_edges_gpu(m):
    """M from 1 to 16 (8- and 16-row x tiles, rows past M), N not a multiple of the row tile, K with a
    partial trip (masked chunks) and whole trips, every group size, both 16-bit types, a bias."""
    cfgs = [k4._decode(1, 4), k4._decode(2, 2, 2, dk=64), k4._decode(1, 8, sub=2, xpf=False),
            k4._decode(4, 4, xpf=False), k4._decode(1, 16, sub=2, xpf=False)]
    for i, (n, k) in enumerate(((1000, 1280), (520, 1408), (4104, 2048), (96, 512))):
        for g in (32, 64, 128, 256):
            if k % g:
                continue
            cfg = cfgs[(i + g // 32 + m) % len(cfgs)]
            if (cfg["WK"] * cfg.get("SUB", 1) * cfg["DK"]) % g:
                continue
            dtype = torch.float16 if (i + m) % 2 else torch.bfloat16
            _check(cfg, m, n, k, g, dtype, bias=(i + g) % 3 == 0, what="edges")


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="needs an sm_90 GPU")
def test_every_candidate_at_llama_shapes_gpu():
    for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
        for m in (1, 16):
            for c in k4.candidate_configs(m, n, k) + [k4.default_config(m, n, k)]:
                if c["kernel"] == "decode":
                    _check(c, m, n, k, 128, torch.bfloat16, what="llama")


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="needs an sm_90 GPU")
def test_strided_rows_fallback_and_graph_gpu():
    """x rows with a row stride (sliced from a wider tensor) run the kernel; an odd row stride (x read
    as column pairs needs even strides) falls back to the small-M kernel with the same result bound;
    a CUDA graph replays it on new inputs."""
    cfg = k4._decode(1, 4)
    base = torch.randn(5, 4096 + 64, device="cuda").to(torch.bfloat16)
    x = base[:, 64:]
    _check(cfg, 5, 1024, 4096, 128, torch.bfloat16, x=x, what="strided")
    odd = torch.randn(3, 4096 + 1, device="cuda").to(torch.bfloat16)[:, 1:]
    _, packed, scale, zero, _, _ = make_problem(3, 256, 4096, 128, torch.bfloat16, "cuda")
    assert ran(cfg, odd, packed, scale, 128)["kernel"] == "small"
    y = k4.linear(odd, packed, scale, zero, None, 128, config=cfg)
    assert_output(y, reference64(odd, packed, scale, zero, None, 128), "odd stride fallback", tc_steps(None, 4096))

    x = torch.randn(1, 4096, device="cuda").to(torch.bfloat16)
    k4.linear(x, packed, scale, zero, None, 128, config=cfg)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = k4.linear(x, packed, scale, zero, None, 128, config=cfg)
    x.copy_(torch.randn(1, 4096, device="cuda"))
    graph.replay()
    assert torch.equal(y, k4.linear(x, packed, scale, zero, None, 128, config=cfg))
    assert_output(y, reference64(x, packed, scale, zero, None, 128), "graph replay", tc_steps(None, 4096))


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="needs an sm_90 GPU")
def test_fp16_scales_with_small_groups_fall_back_gpu():
    """Groups smaller than the chunk multiply by the scale in x's dtype: a scale of another dtype must
    take the fallback (one rounding, as the reference), not the kernel."""
    x, packed, scale, zero, _, _ = make_problem(2, 128, 512, 32, torch.bfloat16, "cuda")
    scale16 = scale.to(torch.float16)
    cfg = k4._decode(1, 4)
    assert ran(cfg, x, packed, scale16, 32)["kernel"] == "small"
    y = k4.linear(x, packed, scale16, zero, None, 32, config=cfg)
    ref = R.int4_weight_only_linear(x, packed, scale16, zero, None, 32)
    assert (y.float() - ref.float()).abs().max() <= 2e-2 * ref.float().abs().max()


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize("m", [1, 5, 8, 13, 16])
def test_int8_edges_gpu(m):
    """int8 weights: M from 1 to 16, N not a multiple of the row tile, K with a partial trip and with
    whole trips, both 16-bit types, a bias, scales in float32 and bf16 — within the int8 tests' float32
    bound (exact products, float32 accumulation, one rounding); a K the kernel cannot take (not a
    multiple of its chunk) falls back."""
    from quantkit.kernels import int8_weight_only as k8
    from quantkit.kernels import wo_decode_sm90 as d
    from tests.kernels.test_int8_weight_only import _assert_within_fp32_bound, _layer_inputs

    cfgs = [k8._decode_config(1, 4), k8._decode_config(2, 4), k8._decode_config(1, 8, sub=2, xpf=False),
            k8._decode_config(1, 4, wm=2, dk=128)]
    for i, (n, k) in enumerate(((1000, 1088), (520, 2048), (4104, 4096), (96, 256), (300, 1000))):
        cfg = cfgs[(i + m) % len(cfgs)]
        dtype = torch.float16 if (i + m) % 2 else torch.bfloat16
        x, wq, ws, b = _layer_inputs(m, n, k, dtype, "cuda", bias=i % 2 == 0,
                                     scale_dtype=torch.bfloat16 if i == 2 else torch.float32)
        assert d.usable_int8(x, wq, cfg) == (k % cfg["DK"] == 0), (n, k, cfg)
        y = k8.linear(x, wq, ws, b, config=cfg)
        _assert_within_fp32_bound(y, x, wq, ws, b, f"int8 decode {cfg} M={m} N={n} K={k}")
        assert torch.equal(y, k8.linear(x, wq, ws, b, config=cfg)), "not deterministic"


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="needs an sm_90 GPU")
def test_int8_candidates_and_graph_gpu():
    """Every int8 decode candidate at the Llama shapes, and a CUDA graph replay on new inputs."""
    from quantkit.kernels import int8_weight_only as k8
    from tests.kernels.test_int8_weight_only import _assert_within_fp32_bound, _layer_inputs

    for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
        for m in (1, 16):
            x, wq, ws, _ = _layer_inputs(m, n, k, torch.bfloat16, "cuda")
            for c in k8.candidate_configs(m, n, k):
                if c["kernel"] == "decode":
                    _assert_within_fp32_bound(k8.linear(x, wq, ws, None, config=c), x, wq, ws, None,
                                              f"int8 decode {c} M={m} N={n} K={k}")
    cfg = k8._decode_config(1, 8)
    x, wq, ws, _ = _layer_inputs(1, 2048, 4096, torch.bfloat16, "cuda")
    k8.linear(x, wq, ws, None, config=cfg)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = k8.linear(x, wq, ws, None, config=cfg)
    x.copy_(torch.randn_like(x))
    graph.replay()
    assert torch.equal(y, k8.linear(x, wq, ws, None, config=cfg))
    _assert_within_fp32_bound(y, x, wq, ws, None, "int8 decode graph replay")


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="needs an sm_90 GPU")
def test_tiled_weights_are_bit_identical_gpu():
    """A TILED config on the tiled bytes gives bit for bit what its row-major twin gives (int4 with
    groups 32 / 128, int8; M 1 / 9 / 16; K with a partial trip); N not a multiple of 16 is refused."""
    from quantkit.kernels import int8_weight_only as k8
    from quantkit.kernels import wo_decode_sm90 as d
    from tests.kernels.test_int8_weight_only import _layer_inputs

    for m in (1, 9, 16):
        for n, k, g, cfg in ((1024, 1280, 128, k4._decode(1, 4)), (512, 4096, 32, k4._decode(2, 4)),
                             (4096, 2048, 128, k4._decode(1, 8, sub=2, xpf=False))):
            x, packed, scale, zero, b, _ = make_problem(m, n, k, g, torch.bfloat16, "cuda", bias=m == 9)
            y = k4.linear(x, packed, scale, zero, b, g, config=cfg)
            tiled = d.tile_weight(packed, cfg["DK"] // 2)
            assert ran(dict(cfg, TILED=True), x, tiled, scale, g)["kernel"] == "decode"
            assert torch.equal(y, k4.linear(x, tiled, scale, zero, b, g, config=dict(cfg, TILED=True))), (m, n, k, g)
        for n, k, cfg in ((1024, 1088, k8._decode_config(1, 4)), (2048, 4096, k8._decode_config(2, 4))):
            x, wq, ws, b = _layer_inputs(m, n, k, torch.float16, "cuda", bias=m == 9)
            y = k8.linear(x, wq, ws, b, config=cfg)
            tiled = d.tile_weight(wq, cfg["DK"])
            assert torch.equal(y, k8.linear(x, tiled, ws, b, config=dict(cfg, TILED=True))), (m, n, k)
    x, packed, scale, zero, _, _ = make_problem(1, 1000, 1024, 128, torch.bfloat16, "cuda")
    out = torch.empty(1, 1000, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="multiple of 16"):
        d.launch(x, packed, scale, zero, None, out, 128, dict(k4._decode(1, 4), TILED=True))


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="needs an sm_90 GPU")
def test_l2_prefetch_hint_is_bit_identical_gpu():
    """The L2 prefetch-size hint changes no value: L2PF 0 and the default 128 give bit for bit the same
    outputs (int4 with groups 32 / 128 and a DIAG program, int8; M 1 / 9 / 16; partial trips, which take the
    masked loads; odd N; a bias)."""
    from quantkit.kernels import int8_weight_only as k8
    from tests.kernels.test_int8_weight_only import _layer_inputs

    for m in (1, 9, 16):
        for n, k, g, cfg in ((1000, 1280, 128, k4._decode(1, 4)), (520, 4096, 32, k4._decode(2, 4)),
                             (4104, 2048, 128, k4._decode(4, 4, xpf=False)),
                             (1000, 3072, 128, k4._decode(1, 1, wm=2, diag=True))):
            x, packed, scale, zero, b, _ = make_problem(m, n, k, g, torch.bfloat16, "cuda", bias=m == 9)
            y0 = k4.linear(x, packed, scale, zero, b, g, config=dict(cfg, L2PF=0))
            assert ran(cfg, x, packed, scale, g)["kernel"] == "decode"
            assert torch.equal(y0, k4.linear(x, packed, scale, zero, b, g, config=cfg)), (m, n, k, g, cfg)
        for n, k, cfg in ((1000, 1088, k8._decode_config(1, 4)), (2056, 4096, k8._decode_config(2, 4))):
            x, wq, ws, b = _layer_inputs(m, n, k, torch.float16, "cuda", bias=m == 9)
            y0 = k8.linear(x, wq, ws, b, config=dict(cfg, L2PF=0))
            assert torch.equal(y0, k8.linear(x, wq, ws, b, config=cfg)), (m, n, k, cfg)


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="needs an sm_90 GPU")
def test_scale_in_and_register_caps_gpu():
    """SCALE_IN configs (the weight (q - z)·s rounded to x.dtype, at groups >= DK too) and register caps
    (MAXNREG, spilling a little) against the float64 reference of that weight: odd N, partial trips, both
    16-bit types, a bias, M = 1 and 16; the same config without SCALE_IN at group 128 stays on the exact
    path."""
    cfgs = [k4._decode(4, 4, xpf=False, scale_in=True), k4._decode(2, 4, scale_in=True, maxnreg=128),
            k4._decode(4, 8, xpf=False, scale_in=True, maxnreg=128), k4._decode(4, 4, xpf=False, maxnreg=168)]
    for i, (n, k) in enumerate(((1000, 1280), (4104, 4096), (96, 2048))):
        for g in (128, 256):
            for j, cfg in enumerate(cfgs):
                if k % g or (cfg["WK"] * cfg["DK"]) % g:
                    continue
                dtype = torch.float16 if (i + j) % 2 else torch.bfloat16
                for m in (1, 16):
                    _check(cfg, m, n, k, g, dtype, bias=(i + j) % 3 == 0, what="scale_in / maxnreg")


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_diag_gpu(m):
    """DIAG configs (8 / 4 / 2 chunks of one row a slot at M = 1 / 2 / 3-4, or fewer where the config's DG
    says so; the matching products of the mma kept) against the float64 reference: int4 with every group size, int8; N not a multiple of the
    program's rows, K with partial trips and whole ones, both 16-bit types, a bias, x rows with a
    stride. At M > 4 the same config runs the plain kernel."""
    from quantkit.kernels import int8_weight_only as k8
    from tests.kernels.test_int8_weight_only import _assert_within_fp32_bound, _layer_inputs

    cfgs = [k4._decode(1, 4, diag=True), k4._decode(2, 2, diag=True), k4._decode(1, 1, diag=True),
            k4._decode(2, 4, sub=2, xpf=False, diag=True), k4._decode(1, 2, wm=2, diag=True),
            k4._decode(1, 1, wm=2, diag=True, dg=2), k4._decode(2, 2, xpf=False, diag=True, dg=4)]
    for i, (n, k) in enumerate(((1000, 1280), (4104, 4096), (96, 2048), (1030, 14336))):
        for g in (32, 64, 128, 256):
            cfg = cfgs[(i + g // 32 + m) % len(cfgs)]
            if k % g or (cfg["WK"] * cfg["SUB"] * cfg["DK"]) % g:
                continue
            dtype = torch.float16 if (i + g) % 2 else torch.bfloat16
            _check(cfg, m, n, k, g, dtype, bias=(i + g) % 3 == 0, what="diag")
    wide = torch.randn(m, 2048 + 64, device="cuda").to(torch.bfloat16)
    _check(cfgs[1], m, 520, 2048, 128, torch.bfloat16, x=wide[:, 64:], what="diag, strided x rows")
    if m == 1:
        _check(cfgs[0], 5, 1000, 1280, 128, torch.bfloat16, what="diag config at M = 5")
    cfgs8 = [k8._decode_config(1, 4, diag=True), k8._decode_config(2, 2, diag=True),
             k8._decode_config(1, 8, sub=2, xpf=False, diag=True), k8._decode_config(1, 2, diag=True, dg=2),
             k8._decode_config(1, 1, xpf=False, diag=True, dg=4)]
    for i, (n, k) in enumerate(((1000, 1088), (4104, 4096), (300, 14336))):
        for cfg in cfgs8:
            dtype = torch.float16 if i % 2 else torch.bfloat16
            x, wq, ws, b = _layer_inputs(m, n, k, dtype, "cuda", bias=i != 1)
            y = k8.linear(x, wq, ws, b, config=cfg)
            _assert_within_fp32_bound(y, x, wq, ws, b, f"int8 diag {cfg} N={n} K={k}")
            assert torch.equal(y, k8.linear(x, wq, ws, b, config=cfg)), "not deterministic"
