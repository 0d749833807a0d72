"""The Gluon weight-only GEMMs for sm_90 (quantkit.kernels.wo_gemm_sm90), int8 and int4.

Gluon kernels do not run in Triton's interpreter, so on the CPU the inline-PTX conversions are
emulated instruction by instruction for every byte value, and every candidate config (both formats)
is compiled for sm_90 with the ptxas that ships with triton (no spills, shared memory within the 227 KB
an H100 CTA may have, and the loop really overlaps: asynchronous wgmma, waited with one group
outstanding, TMA loads, no wgmma serialized by ptxas, in the SASS no register of an in-flight wgmma
rewritten, and for int4 no data movement between the packed bytes' layout and the A operand's).
On the GPU: the benchmark shapes are covered by the int8 and int4 weight-only tests' every-candidate
tests; here odd shapes (M, N and K edges), fp16, a bias, half-precision scales, every int4 group size,
strided x rows, and a CUDA graph — against the float64 formula within the float32 bound (int4: the
int4 tests' bound for a weight rounded once to x.dtype).
"""
from __future__ import annotations

import re
import sys

import pytest
import torch

from quantkit.reference.int8 import quantize_weight_int8_per_channel
from tests.kernels.test_int8_weight_only import (_assert_within, _fp32_bound, _sm90_tools, hgmma_register_hazards,
                                                 run_sm90_check)

_SMEM_LIMIT = 232448  # bytes of shared memory one CTA may use on sm_90


def _candidates():
    from quantkit.kernels import int8_weight_only as k

    seen = []
    for m in (16, 128, 1024, 4096):
        for n, kk in ((4096, 4096), (14336, 4096), (4096, 14336)):
            for c in k.candidate_configs(m, n, kk):
                if c["kernel"] == "tma_wgmma" and c not in seen:
                    seen.append(c)
    return seen


def _compile_main() -> None:
    """Run in a subprocess without TRITON_INTERPRET: compile each candidate (bf16, no bias) and the
    first with fp16 and a bias for sm_90; print one line each and 'ok' when all pass."""
    from quantkit.kernels import wo_gemm_sm90 as g

    jobs = [(c, torch.bfloat16, False) for c in _candidates()]
    jobs.append((jobs[0][0], torch.float16, True))
    failures = []
    for cfg, dtype, has_bias in jobs:
        bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
        x, w = torch.empty(4096, 4096, dtype=dtype), torch.empty(4096, 4096, dtype=torch.int8)
        x_desc, w_desc = g.descriptors(x, w, bm, bn, bk)
        kernel = _compile_rs(x_desc, w_desc, cfg, dtype, has_bias, int4=False, group=bk)
        ptx = kernel.asm["ptx"]
        info, sass = _sm90_tools(kernel)
        spills = int(re.search(r"(\d+) bytes spill stores", info).group(1))
        smem = kernel.metadata.shared
        overlap = ("wgmma.mma_async" in ptx and "wgmma.wait_group.sync.aligned 1;" in ptx
                   and "cp.async.bulk.tensor" in ptx)
        hazards = hgmma_register_hazards(sass)  # a register A operand rewritten while its wgmma runs
        what = f"{cfg} {str(dtype)[6:]} bias={has_bias}"
        print(f"{what}: spills={spills} smem={smem} overlap={overlap} hazards={hazards[:3]}")
        if spills or smem > _SMEM_LIMIT or not overlap or hazards or "C7515" in info or "C7512" in info:
            failures.append(what)
    failures += _compile_int4()
    print("\n".join(failures) if failures else "ok")
    sys.exit(1 if failures else 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_int8_pair_conversion_ptx_emulated(dtype):
    """The register-operand kernel's int8 -> 16-bit conversion: every byte value, in both halves of
    the 16-bit input register, becomes exactly that integer in its half of the output pair."""
    from quantkit.kernels import wo_gemm_sm90 as g
    from tests.kernels.test_int4_weight_only import _halves, run_ptx

    text = (g._ASM_I8X2_TO_BF16X2 if dtype == torch.bfloat16 else g._ASM_I8X2_TO_F16X2).value
    for b0 in range(256):
        b1 = (b0 * 37 + 11) % 256  # every value in the high byte too, against varied low bytes
        for lo, hi in ((b0, b1), (b1, b0)):
            got = _halves(run_ptx(text, {"$1": lo | (hi << 8)}, dtype)["$0"], dtype).tolist()
            want = [float(lo - 256 * (lo >> 7)), float(hi - 256 * (hi >> 7))]
            assert got == want, f"bytes {lo:#04x} {hi:#04x}: {got} != {want}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_int4_byte_conversion_ptx_emulated(dtype):
    """The int4 kernel's conversion of one packed byte with its group's zero-point and scale:
    ((q0 - z)·s, (q1 - z)·s), each rounded once to the 16-bit type, for every byte and zero-point.
    Bits above the byte in the input register are ignored."""
    from quantkit.kernels import wo_gemm_sm90 as g
    from tests.kernels.test_int4_weight_only import _bits16, _expected16, _halves, run_ptx

    text = (g._ASM_I4X2_TO_BF16X2 if dtype == torch.bfloat16 else g._ASM_I4X2_TO_F16X2).value
    magic = 128 if dtype == torch.bfloat16 else 1024
    gen = torch.Generator().manual_seed(4)
    scales = ((torch.rand(16, generator=gen) - 0.5) * 0.05).tolist() + [1.0, -3.0e-3]
    for b in range(256):
        for z in (0, 7, 15, b % 16):
            s = float(torch.tensor(scales[(b + z) % len(scales)]).to(dtype))
            env = run_ptx(text, {"$2": b | 0xABCD00, "$3": _bits16(magic + z, dtype), "$4": _bits16(s, dtype)}, dtype)
            got = [float(_halves(env["$0"], dtype)[0]), float(_halves(env["$1"], dtype)[0])]
            want = [_expected16(b & 15, z, s, dtype, True), _expected16(b >> 4, z, s, dtype, True)]
            assert got == want, f"byte {b:#04x} z={z} s={s}: {got} != {want}"


def _compile_rs(x_desc, w_desc, cfg, dtype, has_bias, int4, group):
    """triton.compile of the register-operand kernel for sm_90 with these descriptors and config."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    from quantkit.kernels import wo_gemm_sm90 as g

    fn = g._wo_rs_kernel
    bm, bn, warps = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["num_warps"]
    out = "*bf16" if dtype == torch.bfloat16 else "*fp16"
    stream_k = bool(cfg.get("STREAM_K"))
    sig = dict(x_desc=mangle_type(x_desc), w_desc=mangle_type(w_desc), scale_ptr=out if int4 else "*fp32",
               z_ptr="*u8" if int4 else "*fp32", bias_ptr=out, y_ptr=out, ws_ptr="*fp32" if stream_k else out,
               cnt_ptr="*i32" if stream_k else out, M="i32", N="i32", K="i32", GROUPS="i32", stride_ym="i32",
               DP_TILES="i32", SK_TILES="i32", SK_LEN="i32", INT4="constexpr", HAS_BIAS="constexpr",
               GROUP_M="constexpr", STAGES="constexpr", GROUP_SIZE="constexpr", INSTR_N="constexpr",
               P_LAYOUT="constexpr", STREAM_K="constexpr", SK_PIECES="constexpr", P3_LAYOUT="constexpr",
               num_warps="constexpr")
    bk = x_desc.block_shape[1]
    consts = dict(INT4=int4, HAS_BIAS=has_bias, GROUP_M=cfg["GROUP_M"], STAGES=cfg["num_stages"], GROUP_SIZE=group,
                  INSTR_N=min(bm, 256), P_LAYOUT=g.packed_a_layout(bn, bk, warps) if int4 else None,
                  STREAM_K=stream_k, SK_PIECES=2 if stream_k else 1,
                  P3_LAYOUT=g.packed_a_layout3(bn, bk, warps, bk // group) if int4 and bk > group else None,
                  num_warps=warps)
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]]
             for a in ("scale_ptr", "z_ptr", "y_ptr", "ws_ptr", "cnt_ptr", "N", "K", "stride_ym")}
    return triton.compile(GluonASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=warps, num_stages=cfg["num_stages"], launch_pdl=stream_k))


def _compile_int4() -> list:
    """The int4 kernel's candidates (bf16) and the first with fp16 and a bias, group 128, and the first at groups
    32 and 16 (two and four groups a 64-deep step, the stream-K variant too): compiled for sm_90, same checks as
    the int8 kernels."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from quantkit.kernels import int4_weight_only as k4
    from quantkit.kernels import wo_gemm_sm90 as g

    cands = [c for c in k4.candidate_configs(4096, 4096, 4096) if c["kernel"] == "tma_wgmma"]
    jobs = [(c, torch.bfloat16, False, 128) for c in cands]
    jobs += [(cands[0], torch.float16, True, 128), (cands[0], torch.bfloat16, False, 32),
             (cands[0], torch.float16, True, 16)]
    jobs += [(c, torch.bfloat16, False, 32) for c in cands if c.get("STREAM_K")][:1]
    failures = []
    for cfg, dtype, has_bias, group in jobs:
        bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
        bk = g.int4_step(cfg["BLOCK_K"], group)
        x, w = torch.empty(4096, 4096, dtype=dtype), torch.empty(4096, 2048, dtype=torch.uint8)
        x_desc = TensorDescriptor(x, list(x.shape), list(x.stride()), [bm, bk],
                                  g._smem_layout(bm, bk, g._GL_DTYPES[dtype]))
        w_desc = TensorDescriptor(w, list(w.shape), list(w.stride()), [bn, bk // 2], g._smem_layout(bn, bk // 2, g.gl.uint8))
        kernel = _compile_rs(x_desc, w_desc, cfg, dtype, has_bias, int4=True, group=group)
        info, sass = _sm90_tools(kernel)
        spills = int(re.search(r"(\d+) bytes spill stores", info).group(1))
        ptx = kernel.asm["ptx"]
        overlap = "wgmma.wait_group.sync.aligned 1;" in ptx and "cp.async.bulk.tensor" in ptx
        # the packed bytes' layout is the A fragment's: the conversion to it moves no data
        loop = ptx.split("wgmma.wait_group.sync.aligned 0;")[0]
        no_shuffle = "st.shared" not in loop and "shfl.sync" not in loop
        hazards = hgmma_register_hazards(sass)
        what = f"int4 {cfg} {str(dtype)[6:]} bias={has_bias} g={group}"
        print(f"{what}: spills={spills} smem={kernel.metadata.shared} overlap={overlap} no_shuffle={no_shuffle} "
              f"hazards={hazards[:3]}")
        if (spills or kernel.metadata.shared > _SMEM_LIMIT or not overlap or not no_shuffle or hazards
                or "C7515" in info or "C7512" in info):
            failures.append(what)
    return failures


def test_candidates_are_offered_above_16_rows_and_for_wide_decode_layers():
    from quantkit.kernels import int8_weight_only as k

    assert _candidates(), "no Gluon config among the candidates"
    for m, n, offered in [(1, 14336, False), (16, 4096, False), (16, 14336, True), (32, 4096, True),
                          (128, 14336, True), (1024, 4096, True)]:
        got = any(c["kernel"] == "tma_wgmma" for c in k.candidate_configs(m, n, 4096))
        assert got == offered, (m, n)


def _kernel_schedule(M, N, K, cfg, sms, bk):
    """A Python model of _wo_rs_kernel's work and load schedule (its index arithmetic, step by step)
    with K steps of ``bk`` (the descriptor's: int4 clamps BLOCK_K to the group): per program, the units
    (tile, kb, nk) it computes and the (tile, K step) each global step's TMA load fetches, following
    the kernel's refill rule (current or next unit only)."""
    from quantkit.kernels import wo_gemm_sm90 as g
    from quantkit.reference.common import ceil_div

    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    tiles = ceil_div(M, bm) * ceil_div(N, bn)
    num_k = 2 * ceil_div(K, 2 * bk)
    stages = g._ring_stages(cfg, num_k)
    split = g.stream_k_split(M, N, K, cfg, sms, bk)
    nprog = g.grid_programs(tiles, sms, num_k, split, True)
    dp_tiles, sk_tiles, sk_len = split if split else (tiles, 0, 0)
    programs = []
    for pid in range(nprog):
        n_dp = (dp_tiles - pid + nprog - 1) // nprog
        lo = min(pid * sk_len, sk_tiles * num_k)
        hi = min(lo + sk_len, sk_tiles * num_k)
        n_units = n_dp + ((hi - 1) // num_k - lo // num_k + 1 if lo < hi else 0)
        total = n_dp * num_k + hi - lo

        def unit(u):
            if split is None or u < n_dp:
                return pid + u * nprog, 0, num_k, u * num_k
            st = lo // num_k + (u - n_dp)
            a, b = max(lo, st * num_k), min(hi, st * num_k + num_k)
            return dp_tiles + st, a - st * num_k, b - a, n_dp * num_k + a - lo

        loads = {}

        def refill(gs, kk, cur, nxt):
            if gs >= total:
                return
            (t, kb, nk, _), (nt, nkb, _, _) = cur, nxt
            assert gs not in loads, f"step {gs} loaded twice"
            loads[gs] = (nt, nkb + kk - nk) if kk >= nk else (t, kb + kk)

        for i in range(stages):
            refill(i, i, unit(0), unit(1))
        units, steps = [], {}
        for u in range(n_units):
            cur, nxt = unit(u), unit(u + 1)
            t, kb, nk, g0 = cur
            units.append((t, kb, nk))
            for k in range(nk):
                steps[g0 + k] = (t, kb + k)
                if u > 0 or k > 0:
                    refill(g0 + k - 1 + stages, k - 1 + stages, cur, nxt)
        programs.append(dict(units=units, steps=steps, loads=loads, total=total, lo=lo, hi=hi))
    return programs, dict(tiles=tiles, num_k=num_k, stages=stages, split=split, nprog=nprog)


@pytest.mark.parametrize("M,N,K,stages,sms,bk", [
    (1024, 14336, 4096, 4, 132, 64),   # 448 tiles: 3 waves + 52 tiles, halves
    (1024, 14336, 4096, 5, 132, 64),
    (1024, 14336, 4096, 4, 132, 32),   # int4 group 32 (K steps of 32): quarters
    (4096, 14336, 4096, 4, 132, 64),   # 1792 tiles: 13 waves + 76 (more than half a wave: plain)
    (4096, 4096, 4096, 5, 7, 64),      # 512 tiles on 7 SMs: 73 waves + 1 tile in quarters
    (2048, 128256, 4096, 4, 132, 64),  # the lm_head at prefill: 8016 tiles, 60 waves + 96 (plain)
    (1030, 4096, 4096, 4, 132, 64),    # 160 tiles: 1 wave + 28 tiles in quarters
    (1030, 4096, 4096, 4, 132, 32),    # group 32: 128 K steps, 28 tiles in quarters of 32
    (2000, 2304, 128, 4, 132, 64),     # 2 K steps: no piece can be cut
    (1000, 2000, 1040, 5, 7, 64),      # 64 tiles on 7 SMs, 18 K steps: 9 waves + 1 tile in thirds
    (4096, 4096, 4096, 4, 128, 64),    # whole waves: no stream-K
    (128, 4096, 4096, 4, 132, 64),     # 32 tiles, no whole wave: every tile in quarters (split-K)
    (200, 4096, 14336, 6, 132, 64),    # 32 tiles, 224 K steps: quarters of 56
    (100, 8192, 4096, 4, 132, 32),     # 64 tiles, int4 group 32 (128 K steps): halves
    (128, 8960, 4096, 4, 132, 64),     # 70 tiles, more than half the SMs: plain
    (64, 1000, 96, 4, 132, 64),        # 8 tiles of 2 K steps: no piece can be cut
])
def test_stream_k_schedule_model(M, N, K, stages, sms, bk):
    """Every (tile, K step) is computed exactly once, within the grid; every unit is even and at least
    STAGES - 1 steps (the refill rule reaches into the next unit only), every step is loaded exactly
    once with the right tile and K step; a program holds at most one piece, and the pieces of tile st
    are programs st·PIECES .. st·PIECES + PIECES - 1 in K order (their workspace slots and the order
    in which the combining program adds them)."""
    from quantkit.kernels import int8_weight_only as k
    from quantkit.kernels import wo_gemm_sm90 as g

    cfg = k._tma_wgmma_config(256, 128, 64, 8, stages, stream_k=True)
    programs, info = _kernel_schedule(M, N, K, cfg, sms, bk)
    num_k, split = info["num_k"], info["split"]
    rest = info["tiles"] % sms
    cuts = [n for n in range(2, num_k) if num_k % n == 0 and n % 2 == 0 and n >= info["stages"] - 1
            and 4 * n >= num_k and n * sms >= rest * num_k]
    if rest == 0 or 2 * rest > sms or not cuts:
        assert split is None  # no partial wave, one more than half full, or no piece length fits
    else:
        assert split == (info["tiles"] - rest, rest, cuts[0])
        # every SM busy where there are whole waves, else one program a piece
        assert info["nprog"] == (sms if info["tiles"] > sms else rest * (num_k // cuts[0]))
    covered = {}
    pieces: dict[int, list] = {}
    for pid, prog in enumerate(programs):
        assert sorted(prog["steps"]) == list(range(prog["total"]))
        assert prog["loads"] == prog["steps"], f"program {pid}: loads differ from the steps computed"
        assert sum(nk < num_k for _, _, nk in prog["units"]) <= 1, f"program {pid} holds two pieces"
        for t, kb, nk in prog["units"]:
            # even units from even steps: the int4 group loads rely on it (odd steps never start a group)
            assert kb % 2 == 0 and nk % 2 == 0 and nk >= max(2, info["stages"] - 1), (pid, t, kb, nk)
            for kk in range(kb, kb + nk):
                assert (t, kk) not in covered, f"tile {t} step {kk} twice"
                covered[(t, kk)] = pid
            if nk < num_k:
                pieces.setdefault(t - split[0], []).append((pid, kb))
    assert len(covered) == info["tiles"] * num_k
    for st, ps in pieces.items():
        n = num_k // split[2]
        assert 2 <= n <= g.SK_MAX_PIECES.value
        assert ps == [(st * n + i, i * split[2]) for i in range(n)], (st, ps)


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


@pytest.mark.parametrize("change,why", [
    (dict(BLOCK_M=96), "BLOCK_M"), (dict(BLOCK_M=512), "BLOCK_M"), (dict(num_warps=2), "num_warps"),
    (dict(BLOCK_N=64), "multiple of 16 x num_warps"), (dict(BLOCK_K=16), "BLOCK_K"), (dict(num_stages=1), "num_stages"),
    (dict(num_stages=7), "shared memory"), (dict(BLOCK_K=64.0), "ints"), (dict(STREAM_K=1), "booleans"),
])
def test_bad_gluon_gemm_configs_are_rejected(kernel_device, change, why):
    """A tma_wgmma config the Gluon kernel cannot compile or run is refused with a ValueError naming
    the family and the key, on every device (before any fallback), for int8 and int4 alike."""
    from quantkit.kernels import int4_weight_only as k4
    from quantkit.kernels import int8_weight_only as k

    cfg = dict(k._tma_wgmma_config(256, 128, 64, 8, 4, stream_k=True), **change)
    weight_q, weight_scale = quantize_weight_int8_per_channel(torch.randn(64, 128, device=kernel_device) * 0.02)
    x = torch.randn(32, 128, device=kernel_device).to(torch.bfloat16)
    with pytest.raises(ValueError, match=f"int8_weight_only tma_wgmma config: .*{why}"):
        k.linear(x, weight_q, weight_scale, config=cfg)
    if why != "shared memory":  # packed int4 tiles are half the bytes: 7 stages of them fit
        with pytest.raises(ValueError, match="int4_weight_only (tma_wgmma )?config"):  # (its own checks run first)
            k4._check_config(dict(k4._tma_wgmma(stream_k=True), **change))


@pytest.mark.slow
def test_every_candidate_compiles_for_sm90():
    run_sm90_check("from tests.kernels.test_wo_gemm_sm90 import _compile_main; _compile_main()")


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
    (1030, 4096, 4096, torch.bfloat16, True, torch.float32),  # 160 tiles: stream-K pieces of 16 steps
    (128, 4096, 4096, torch.bfloat16, True, torch.float32),   # 32 tiles, no whole wave: split-K in quarters
    (100, 1000, 2048, torch.float16, False, torch.bfloat16),  # 8 tiles with M and N tails, split-K
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


_INT4_CASES = [  # (M, N, K, group, dtype, bias): M, N and K tails, every group size, fp16
    (300, 1000, 1024, 128, torch.bfloat16, True),
    (257, 384, 4096, 64, torch.float16, False),
    (1030, 4096, 256, 32, torch.bfloat16, False),   # two (BLOCK_K 128: four) groups a step; K shorter than the ring
    (520, 136, 3328, 256, torch.bfloat16, True),    # 13 K steps: the odd step is zero-filled
    (2000, 2304, 128, 128, torch.bfloat16, False),  # 2 K steps, 144 tiles: persistent refills cross tiles
    (1030, 4096, 4096, 64, torch.float16, True),    # 160 tiles: stream-K pieces across group boundaries
    (1030, 4096, 4096, 32, torch.bfloat16, False),  # stream-K with two groups a K step
    (300, 512, 4128, 32, torch.float16, True),      # the last 64-deep step half past K: its second group masked
    (257, 384, 1024, 16, torch.float16, True),      # four (eight) groups of 16 a step
    (1030, 4096, 3328, 256, torch.bfloat16, True),  # 4 K steps a group; stream-K halves start mid-group (step 26)
    (128, 4096, 4096, 128, torch.bfloat16, True),   # 32 tiles, no whole wave: split-K in quarters
    (100, 1000, 2048, 64, torch.float16, False),    # 8 tiles with M and N tails, split-K
]


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,g,dtype,bias", _INT4_CASES)
def test_gpu_int4_edges_against_the_bound(M, N, K, g, dtype, bias):
    """The int4 kernel (every candidate) against the float64 product with the weight rounded once to
    x.dtype, within the bound of the int4 tests (tensor-core accumulation through K)."""
    _sm90()
    from quantkit.kernels import int4_weight_only as k4
    from quantkit.kernels import wo_gemm_sm90 as g4
    from tests.kernels.test_int4_weight_only import assert_output, make_problem, reference64, tc_steps

    torch.manual_seed(2)
    x, packed, scale, zero, b, _ = make_problem(M, N, K, g, dtype, "cuda", bias=bias)
    ref = reference64(x, packed, scale, zero, b, g, dtype)
    cfgs = []
    for m, n in ((4096, 4096), (128, 4096), (128, 14336)):  # large M; M = 17-256 (64-row weight tiles, split-K)
        cfgs += [c for c in k4.candidate_configs(m, n, 4096) if c["kernel"] == "tma_wgmma" and c not in cfgs]
    for cfg in cfgs:
        assert g4.usable_int4(x, packed, scale, g, cfg["BLOCK_K"])
        y = k4.linear(x, packed, scale, zero, b, g, config=cfg)
        assert_output(y, ref, f"M={M} N={N} K={K} g={g} {dtype} {cfg}", tc_steps(cfg, K))
        again = k4.linear(x, packed, scale, zero, b, g, config=cfg)
        assert torch.equal(y, again), f"{cfg}: outputs change between runs (a race)"


@pytest.mark.gpu
def test_gpu_int4_strided_rows_cuda_graph_and_fallback():
    _sm90()
    from quantkit.kernels import int4_weight_only as k4
    from tests.kernels.test_int4_weight_only import assert_output, make_problem, reference64, tc_steps

    torch.manual_seed(3)
    _, packed, scale, zero, _, _ = make_problem(1, 512, 1024, 128, torch.bfloat16, "cuda")
    base = torch.randn(600, 1032, device="cuda").to(torch.bfloat16)
    x = base[:, 8:]  # 16-byte aligned rows, not contiguous
    cfg = next(c for c in k4.candidate_configs(4096, 4096, 4096) if c["kernel"] == "tma_wgmma")
    y = k4.linear(x, packed, scale, zero, None, 128, config=cfg)
    assert_output(y, reference64(x, packed, scale, zero, None, 128, torch.bfloat16), "strided x rows",
                  tc_steps(cfg, 1024))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_graph = k4.linear(x, packed, scale, zero, None, 128, config=cfg)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y_graph, y)
    # fp16 scales with bf16 x: the conversion multiplies in x's dtype, so dequant_mm runs instead
    y_fb = k4.linear(x, packed, scale.half(), zero, None, 128, config=cfg)
    assert_output(y_fb, reference64(x, packed, scale.half(), zero, None, 128, torch.bfloat16), "fallback",
                  tc_steps(cfg, 1024))


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


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1030, 128], ids=["partial-wave", "split-k"])
@pytest.mark.parametrize("int4", [False, True], ids=["int8", "int4"])
def test_gpu_stream_k_graph_plan_and_one_allocation(int4, M):
    """A stream-K launch (zeroing kernel, then the GEMM as its programmatic dependent): captured in a
    CUDA graph and replayed, recorded and replayed by a launch plan, equal to the eager output bit for
    bit; its pieces' sums live in the output's one allocation; the pieces really are combined (the
    split is asserted)."""
    _sm90()
    import functools

    from quantkit.kernels import int4_weight_only as k4
    from quantkit.kernels import int8_weight_only as k8
    from quantkit.kernels import wo_gemm_sm90 as g
    from quantkit.kernels.plan import planned
    from tests.kernels.test_int4_weight_only import make_problem

    torch.manual_seed(5)
    N, K = 4096, 4096
    if int4:
        x, packed, scale, zero, _, _ = make_problem(M, N, K, 128, torch.bfloat16, "cuda")
        cfg = k4._tma_wgmma(stream_k=True)
        fn = functools.partial(k4.linear, config=cfg)
        args = (packed, scale, zero, None, 128)
    else:
        weight_q, weight_scale = quantize_weight_int8_per_channel(torch.randn(N, K, device="cuda") * 0.02)
        x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        cfg = k8._tma_wgmma_config(256, 128, 64, 8, 4, stream_k=True)
        fn = functools.partial(k8.linear, config=cfg)
        args = (weight_q, weight_scale)
    split = g.stream_k_split(M, N, K, cfg, torch.cuda.get_device_properties(0).multi_processor_count)
    assert split is not None and split[2] < 64, split  # tiles cut into pieces
    y = fn(x, *args)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    y2 = fn(x, *args)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] - before == 1  # the output's block
    assert torch.equal(y, y2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_graph = fn(x, *args)
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y_graph, y)
    run = planned(fn)
    outs = [run(x, *args) for _ in range(4)]  # the second call is recorded, the later ones replay
    assert all(type(p).__name__ == "Plan" for p in run.plans.values()), run.plans
    for o in outs:
        assert torch.equal(o, y)


@pytest.mark.parametrize("M,rows", [(300, 128), (384, 128), (530, 128), (600, 128), (1100, 128), (1300, 128),
                                    (700, 256), (768, 256), (1024, 256), (2100, 256), (2048, 256), (4096, 256)])
def test_fit_rows_pads_to_128_where_256_row_tiles_would_be_mostly_padding(M, rows):
    from quantkit.kernels import wo_gemm_sm90 as g

    tuned = {"kernel": "tma_wgmma", "BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8,
             "num_stages": 5, "PERSISTENT": True, "STREAM_K": True}
    fitted = g.fit_rows(tuned, M)
    assert fitted["BLOCK_M"] == rows
    assert fitted is (tuned if rows == 256 else g.ROWS_128_CONFIG)
    # other kernels and tiles are the table's choice at every M
    for other in ({"kernel": "dequant_mm", "BLOCK_N": 16, "BLOCK_K": 512, "num_warps": 4}, dict(tuned, BLOCK_M=128)):
        assert g.fit_rows(other, M) is other


@pytest.mark.gpu
@pytest.mark.parametrize("int4", [False, True], ids=["int8", "int4"])
def test_gpu_layers_take_128_row_tiles_between_the_buckets(int4):
    """At M = 530 the layer runs ROWS_128_CONFIG (whatever the table holds for M's bucket), bit for bit the forced
    config, within the float32 bound; at M = 700 the table's tiles."""
    _sm90()
    from quantkit.kernels import int4_weight_only as k4
    from quantkit.kernels import int8_weight_only as k8
    from quantkit.kernels import wo_gemm_sm90 as g
    from tests.kernels.test_int4_weight_only import assert_output, make_problem, reference64, tc_steps

    torch.manual_seed(7)
    N, K = 4096, 4096
    for M in (530, 700):
        if int4:
            x, packed, scale, zero, _, _ = make_problem(M, N, K, 128, torch.bfloat16, "cuda")
            args, fn = (packed, scale, zero, None, 128), k4.linear
        else:
            weight_q, weight_scale = quantize_weight_int8_per_channel(torch.randn(N, K, device="cuda") * 0.02)
            x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
            args, fn = (weight_q, weight_scale), k8.linear
        y = fn(x, *args)
        forced = fn(x, *args, config=g.ROWS_128_CONFIG)
        assert torch.equal(y, forced) == (M == 530), M
        if int4:
            assert_output(y, reference64(x, *args, torch.bfloat16), f"M={M}", tc_steps(g.ROWS_128_CONFIG, K))
        else:
            exact, bound = _fp32_bound(x, weight_q, weight_scale.float(), None, torch.bfloat16)
            _assert_within(y, exact, bound, f"M={M}")
