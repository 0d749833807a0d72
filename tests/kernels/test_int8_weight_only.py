"""int8 weight-only (A16W8) Triton kernels against quantkit.reference.int8.

On the CPU the kernels run in Triton's interpreter (small, odd shapes), and a subprocess compiles
every shipped launch for sm_90 (no GPU needed) to check registers, shared memory and the SASS for
the wgmma register hazard that made whole output tiles wrong on the H100. The ``gpu`` tests run
the Llama layer shapes with every candidate config of every benchmark cell (twice: the kernels are
deterministic, so any difference between two runs is a race), torch.compile and CUDA graphs.

Tolerances are not guesses: both the kernel and the reference sum K float32 products in some order,
so each differs from the exact (float64) value of the same formula by at most the float32
summation bound (K + 2)·2⁻²⁴·Σ|x·Wq·s| plus half an ulp of the output dtype. Integer-valued
inputs make every partial sum exact, so there the outputs must match the reference bit for bit.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile

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


def _gemv(bn, bk, warps=4, stages=1):
    return {"kernel": "gemv", "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages}


def _stream(bn, bk, warps=4, stages=2, bm=16):
    return {"kernel": "stream", "BLOCK_N": bn, "BLOCK_M": bm, "BLOCK_K": bk, "num_warps": warps,
            "num_stages": stages}


def _mma_ss(bm, bn, bk, warps=4, stages=2, group=8):
    return {"kernel": "mma_ss", "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group, "num_warps": warps,
            "num_stages": stages}


def _mma(bn, bm, bk, warps=4, stages=2, split=1, group=8):
    return {"kernel": "mma", "BLOCK_N": bn, "BLOCK_M": bm, "BLOCK_K": bk, "SPLIT_K": split, "GROUP_N": group,
            "num_warps": warps, "num_stages": stages}


# (name, M, N, K, config): every kernel variant and branch (M = 1 broadcast row, several M and N
# tiles, masked K tail or not, split or not, grouped order, rows not 16-byte aligned), at shapes that
# are not multiples of the tiles.
VARIANTS = [
    ("gemv", 1, 123, 123, _gemv(16, 64)),
    ("gemv-pipelined-rows", 3, 40, 128, _gemv(16, 64, stages=2)),
    ("stream-m1-broadcast", 1, 123, 200, _stream(16, 128, warps=4)),  # X_BCAST, K tail, N tail
    ("stream-even-k", 5, 70, 256, _stream(16, 64, warps=2)),  # 2 warp K slices, 4 full steps
    ("stream-m-tiles", 33, 40, 96, _stream(32, 64, warps=2)),  # 3 M tiles sharing each weight tile
    ("stream-unaligned-k", 7, 50, 100, _stream(16, 128, warps=4)),  # K % 16 != 0, step shrunk to K
    ("mma-small", 5, 123, 144, _mma(64, 16, 32)),
    ("mma-small-splitk", 16, 130, 240, _mma(64, 16, 32, split=2)),
    ("mma-tiles-grouped", 70, 130, 96, _mma(64, 32, 32, split=1, group=2)),
    ("mma-large-splitk", 33, 64, 256, _mma(64, 64, 64, warps=8, split=4)),
    ("mma-unaligned-k", 9, 50, 100, _mma(64, 16, 32)),  # K % 16 != 0: the launcher's safe tile
    ("mma-ss-grouped", 70, 130, 144, _mma_ss(64, 64, 64, group=2)),  # M, N tails, K tail, 2 groups
    ("mma-ss-even-k", 40, 64, 128, _mma_ss(32, 32, 32, warps=4, stages=3)),
    ("mma-ss-unaligned-k", 20, 50, 100, _mma_ss(64, 64, 64)),  # rerouted to the mma safe tile
]
VARIANT_IDS = [v[0] for v in VARIANTS]


def _exact(x, weight_q, weight_scale, bias):
    """The reference formula in float64 (no rounding except the inputs')."""
    y = (x.double() @ weight_q.double().t()) * weight_scale.double().reshape(1, -1)
    if bias is not None:
        y = y + bias.double()
    return y


def _fp32_bound(x, weight_q, weight_scale, bias, out_dtype, extra_rel=0.0):
    """(exact, bound) with the bound on |y - exact|:
    rounding(out)·|exact| + ((K+2)·2⁻²⁴ + extra_rel)·(Σ|x·Wq·s| + |bias|)."""
    K = x.shape[1]
    exact = _exact(x, weight_q, weight_scale, bias)
    mag = (x.double().abs() @ weight_q.double().abs().t()) * weight_scale.double().abs().reshape(1, -1)
    if bias is not None:
        mag = mag + bias.double().abs()
    return exact, _out_rounding(out_dtype) * exact.abs() + ((K + 2) * 2.0 ** -24 + extra_rel) * mag + 1e-30


def _assert_within(y, exact, bound, what):
    err = (y.double() - exact).abs()
    bad = err > bound
    assert not torch.isnan(y).any(), f"{what}: NaN in output"
    if bad.any():
        idx = bad.nonzero()[:5]
        rows = [f"  at {tuple(i.tolist())}: got {y[tuple(i)].item():.7g}, exact {exact[tuple(i)].item():.7g}, "
                f"bound {bound[tuple(i)].item():.3g}" for i in idx]
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} outside the float32 bound:\n"
                             + "\n".join(rows))


def _assert_within_fp32_bound(y, x, weight_q, weight_scale, bias, what, extra_rel=0.0):
    exact, bound = _fp32_bound(x, weight_q, weight_scale, bias, y.dtype, extra_rel)
    _assert_within(y, exact, bound, what)


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


@pytest.mark.parametrize("M,kind", [(1, "decode"), (3, "decode"), (5, "stream"), (16, "stream"), (80, "tma_wgmma"),
                                    (300, "tma_wgmma")])
def test_default_config_dispatch(kernel_device, M, kind):
    """config=None: the DIAG decode programs at M = 1-4 (K = 200 is not a multiple of their chunk, so the
    GEMV runs at M = 1 and the stream kernel at 2-4: the fallbacks elsewhere too), the streaming tensor-core
    kernel up to 16 rows, the Gluon TMA kernel above (K = 200 is not a multiple of 16, so there the
    Triton fallbacks run: wgmma tiles with the weight in registers up to 256 rows, mma_ss above);
    N, K off the tiles."""
    k = _module()
    N, K = 96, 200
    assert k.default_config(M, N, K)["kernel"] == kind
    if M == 1:
        assert k.default_config(1, 128256, 4096)["kernel"] == "gemv"  # the lm_head: the GEMV's lead
        x = torch.empty(1, K, dtype=torch.bfloat16)
        plan = k._plan(x, torch.empty(N, K, dtype=torch.int8), torch.empty(N), None, torch.empty(1, N), 1, N, K,
                       k.default_config(1, N, K))
        assert plan[0][0] is k._gemv_fast
    if 16 < M <= 256:  # (above, mma_ss; with these unaligned rows, the mma kernel again)
        x = torch.empty(M, K, dtype=torch.bfloat16)
        plan = k._plan(x, torch.empty(N, K, dtype=torch.int8), torch.empty(N), None, torch.empty(M, N), M, N, K,
                       k.default_config(M, N, K))
        assert plan[0][0] is k._mma_fast
    x, weight_q, weight_scale, bias = _layer_inputs(M, N, K, torch.bfloat16, kernel_device, bias=True)
    y = k.linear(x, weight_q, weight_scale, bias)
    _assert_within_fp32_bound(y, x, weight_q, weight_scale, bias, f"default config at M={M}")


@pytest.mark.parametrize("scale_dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("config", [_gemv(16, 64), _stream(16, 64, warps=2), _mma(64, 16, 32, split=2)],
                         ids=["gemv", "stream", "mma"])
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
    for config in (_gemv(8, 32), _stream(16, 32, warps=2), _mma(64, 16, 32), _mma_ss(64, 64, 32)):
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
    # a config missing a key, or with a tile size that is not a power of two: named before any launch
    with pytest.raises(ValueError, match=r"int8_weight_only gemv config .* lacks \['BLOCK_K'\]"):
        k.linear(x, weight_q, weight_scale, config={"kernel": "gemv", "BLOCK_N": 16, "num_warps": 4})
    with pytest.raises(ValueError, match="BLOCK_M must be a power of two"):
        k.linear(x, weight_q, weight_scale, config=dict(_stream(16, 32), BLOCK_M=12))
    with pytest.raises(ValueError, match="DK must be 64 or 128"):
        k.linear(x, weight_q, weight_scale, config={"kernel": "decode", "MT": 1, "WK": 4, "WM": 1, "DK": 32})
    with pytest.raises(ValueError, match="L2PF"):
        k.linear(x, weight_q, weight_scale, config={"kernel": "decode", "MT": 1, "WK": 4, "WM": 1, "DK": 64,
                                                    "L2PF": 64})


def _bench_cells():
    from quantkit.kernels.tuning import BENCH_M, LLAMA_SHAPES

    return [(m, n, kk) for n, kk in LLAMA_SHAPES for m in BENCH_M]


def test_config_space_fits_the_sweep_budget():
    """≤ 8 candidates per problem, every default among them, and few compilations over the 15 cells
    (SPLIT_K is a runtime argument and PERSISTENT only sets the grid: configs that differ only in them
    share one compilation; the streaming kernel at M = 1 is its own compilation, the broadcast-row
    one; STREAM_K is a compile-time flag of the Gluon kernel, two more)."""
    k = _module()
    dicts, compiled = set(), set()
    for m, n, kk in _bench_cells():
        cands = k.candidate_configs(m, n, kk)
        assert 1 <= len(cands) <= 8
        assert k.default_config(m, n, kk) in cands
        for c in cands:
            dicts.add(json.dumps(c, sort_keys=True))
            compiled.add(json.dumps({**c, "SPLIT_K": c.get("SPLIT_K", 1) > 1, "PERSISTENT": None,
                                     "bcast": c["kernel"] == "stream" and m == 1}, sort_keys=True))
    assert len(compiled) <= 26, sorted(compiled)
    assert len(dicts) <= 40


def test_decode_sizes_take_one_launch_and_no_workspace():
    """M ≤ 16: every default and candidate config is a single launch writing the output directly
    (no split-K workspace, no second kernel), through the low-overhead cached launcher."""
    k = _module()
    from quantkit.kernels.launch import CachedKernel

    problems = [(m, n, kk) for m, n, kk in _bench_cells() if m <= 16] + [(2, 96, 200), (9, 1000, 4096)]
    for m, n, kk in problems:
        x = torch.empty(m, kk, dtype=torch.bfloat16)
        w = torch.empty(n, kk, dtype=torch.int8)
        s = torch.empty(n)
        out = torch.empty(m, n, dtype=torch.bfloat16)
        for cfg in [k.default_config(m, n, kk)] + k.candidate_configs(m, n, kk):
            plan = k._plan(x, w, s, None, out, m, n, kk, cfg)
            assert len(plan) == 1, (m, n, kk, cfg)
            fast, grid, args, _ = plan[0]
            assert isinstance(fast, CachedKernel) and args[4] is out, (m, n, kk, cfg)
            programs = grid[0] * (grid[1] if len(grid) > 1 else 1)
            if n >= 4096:  # enough programs along N alone to stream the weight on 132 SMs
                assert programs >= 128, (m, n, kk, cfg, grid)


@pytest.mark.parametrize("K,block_k,split", [(4096, 512, 3), (14336, 128, 8), (123, 32, 3), (100, 512, 4), (96, 32, 7)])
def test_split_plan_divides_the_k_loop_evenly(K, block_k, split):
    k = _module()
    iters, splits = k._split_plan(K, block_k, split)
    total = -(-K // block_k)
    assert 1 <= splits <= split and iters * splits == total


# --------------------------------------------------------------------------- sm_90 SASS checks (CPU)
_SASS_INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)\s*(.*?)\s*;")
_SASS_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_SASS_REG = re.compile(r"^-?\|?R(\d+)")
_NO_REG_DEST = ("ST", "BAR", "BRA", "EXIT", "LDGSTS", "LDGDEPBAR", "WARPGROUP", "DEPBAR", "RED", "ATOM",
                "MEMBAR", "FENCE", "NOP", "UTMA", "SYNCS", "CCTL", "ERRBAR", "WARPSYNC", "BSSY", "BSYNC", "CALL",
                "RET", "ISETP", "FSETP", "HSETP", "DSETP", "PLOP3", "R2P", "HGMMA", "U")


def _sass_dest_regs(op: str, operands: list[str]) -> set[int]:
    """General-purpose registers an instruction writes (first operand; SHFL writes its second)."""
    if op.startswith(_NO_REG_DEST) or not operands:
        return set()
    m = _SASS_REG.match(operands[1] if op.startswith("SHFL") and len(operands) > 1 else operands[0])
    if not m:
        return set()
    width = 4 if (".128" in op or op.endswith(".4")) else 2 if (".64" in op or ".WIDE" in op or op.endswith(".2")
                                                                 or op.startswith("CS2R")) else 1
    first = int(m.group(1))
    return set(range(first, first + width))


def hgmma_register_hazards(sass: str) -> list[str]:
    """In every loop of sm_90 SASS that issues HGMMA: writes to a register that an HGMMA still in
    flight reads (its A fragment, 4 registers, when A comes from registers) or accumulates into,
    and shared-memory writes (STS, cp.async) while any HGMMA is in flight.
    Each HGMMA marked ``gsb0`` closes a wgmma group; ``WARPGROUP.DEPBAR.LE gsb0, n`` leaves the last
    n groups in flight. The loop body is walked three times, so MMAs left in flight at the back edge
    meet the next iteration's writes (the H100 failure: the next step's int8 conversion overwrote the
    A registers of the previous step's last three wgmmas)."""
    ins, labels = [], {}
    for line in sass.splitlines():
        m = _SASS_LABEL.match(line)
        if m:
            labels[m.group(1)] = len(ins)
            continue
        m = _SASS_INSTR.search(line)
        if m:
            ins.append((m.group(1), [o.strip() for o in m.group(2).split(",")] if m.group(2) else []))
    found = []
    for label, start in labels.items():
        for end in (i for i, (op, o) in enumerate(ins) if op == "BRA" and o and label in o[0] and i >= start):
            body = ins[start:end + 1]
            if not any(op.startswith("HGMMA") for op, _ in body):
                continue
            groups: list[tuple[set, int]] = []  # in flight: (registers read or written, index in the body)
            open_group: set = set()
            for walk in range(3):
                for i, (op, o) in enumerate(body):
                    if op.startswith("HGMMA"):
                        n = int(re.search(r"HGMMA\.\d+x(\d+)x", op).group(1))
                        acc0 = int(_SASS_REG.match(o[0]).group(1))
                        open_group |= set(range(acc0, acc0 + n // 2))
                        a = _SASS_REG.match(o[1])
                        if a:
                            open_group |= set(range(int(a.group(1)), int(a.group(1)) + 4))
                        if "gsb0" in o:
                            groups.append((open_group, i))
                            open_group = set()
                    elif op.startswith("WARPGROUP.DEPBAR"):
                        keep = int(o[1], 16) if len(o) > 1 else 0
                        groups = groups[max(0, len(groups) - keep):] if keep else []
                    elif op.startswith(("STS", "LDGSTS")) and (groups or open_group):
                        # Our kernels write shared memory only when no wgmma is in flight: the
                        # operand buffers a wgmma may still read are never overwritten.
                        found.append(f"{label} walk {walk}: #{i} {op} writes shared memory while "
                                     f"{len(groups) + bool(open_group)} wgmma group(s) are in flight")
                    else:
                        written = _sass_dest_regs(op, o)
                        for regs, j in groups + ([(open_group, i)] if open_group else []):
                            if written & regs:
                                found.append(f"{label} walk {walk}: #{i} {op} {o[0]} overwrites "
                                             f"R{sorted(written & regs)} of the in-flight HGMMA #{j}")
    return sorted(set(found))


def _sm90_compile(fn, args, kwargs, capability: int = 90):
    """triton.compile for sm_90 (or ``capability``) with exactly the specialization a launch with these
    arguments gets."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", capability, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound_args, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound_args, specialization, options)
    return triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)


def _sm90_tools(compiled) -> tuple[str, str]:
    """(ptxas -v report, SASS) with the ptxas / nvdisasm that ship with triton."""
    import triton

    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(ptx, "w") as f:
            f.write(compiled.asm["ptx"])
        with open(cubin, "wb") as f:
            f.write(compiled.asm["cubin"])
        info = subprocess.run([os.path.join(bin_dir, "ptxas"), "-arch=sm_90a", "-v", ptx, "-o", os.devnull],
                              capture_output=True, text=True, check=True).stderr
        sass = subprocess.run([os.path.join(bin_dir, "nvdisasm"), "-c", cubin], capture_output=True, text=True,
                              check=True).stdout
    return info, sass


def run_compile_jobs(jobs, compile_fn, extra) -> None:
    """Compile each (config, output dtype, bias) job for sm_90 with ``compile_fn``; print a line each
    (registers, spills, shared memory and what ``extra(kernel, info, sass)`` returns: (text, ok)); exit 1
    when a job spills, exceeds an H100's shared memory or ``extra`` says it is not ok; 'ok' last."""
    failures = []
    for cfg, dtype, bias in jobs:
        kernel = compile_fn(cfg, dtype, bias)
        info, sass = _sm90_tools(kernel)
        spills = int(re.search(r"(\d+) bytes spill stores", info).group(1))
        regs = int(re.search(r"Used (\d+) registers", info).group(1))
        smem = kernel.metadata.shared
        text, ok = extra(kernel, info, sass)
        what = f"{cfg} {dtype} bias={bias}"
        print(f"{what}: regs={regs} spills={spills} smem={smem} {text}")
        if spills or smem > 232448 or not ok:
            failures.append(what)
    if failures:
        print("FAILED:", failures)
        raise SystemExit(1)
    print("ok")


def _sm90_check_main() -> None:
    """Run in a subprocess without TRITON_INTERPRET (see the test below): compile every launch of
    every candidate config of the 15 benchmark cells (bf16), and of each kernel's largest tiles with
    fp16, fp32, a bias and a K that is not a multiple of 16; print one line per compilation; exit 1
    on a failure."""
    from quantkit.kernels import int8_weight_only as k
    from quantkit.kernels.launch import _spec

    problems = [(m, n, kk, torch.bfloat16, False, cfg) for m, n, kk in _bench_cells()
                for cfg in k.candidate_configs(m, n, kk)]
    # Every kernel, each with its largest candidate tiles: other dtypes and unaligned rows.
    for m, cfg in [(1, k._gemv_config(16, 512, 4, 3)), (1, k._stream_config(16, 512, 4, 4)),
                   (16, k._stream_config(32, 512, 8, 3)), (32, k._mma_default(32, 4096, 4096)),
                   (128, k._mma_config(64, 128, 128, 4, 4)), (1024, k._mma_config(128, 256, 64, 8, 3)),
                   (1024, k._mma_ss_config(256, 128, 64, 8, 3)), (1024, k._mma_ss_config(128, 256, 64, 8, 3))]:
        problems += [(m, 4096, 4096, torch.float16, True, cfg), (m, 4096, 4096, torch.float32, True, cfg),
                     (m, 4096, 4100, torch.bfloat16, False, cfg)]
    problems.append((32, 4096, 4096, torch.bfloat16, False, k._mma_default(32, 4096, 4096)))  # split-K, graph test
    jobs, seen = [], set()
    for m, n, kk, dtype, has_bias, cfg in problems:
        # torch.empty does not touch the pages: real shapes and strides at no memory cost.
        x, w, s = torch.empty(m, kk, dtype=dtype), torch.empty(n, kk, dtype=torch.int8), torch.empty(n)
        bias = torch.empty(n, dtype=dtype) if has_bias else None
        out = torch.empty(m, n, dtype=dtype)
        for fast, _, args, kwargs in k._plan(x, w, s, bias, out, m, n, kk, cfg):
            key = (fast.fn.__name__, repr(sorted(kwargs.items())), tuple(map(_spec, args)))
            if key not in seen:
                seen.add(key)
                jobs.append((f"{fast.fn.__name__} M={m} N={n} K={kk} {str(dtype)[6:]} {cfg}", fast.fn, args, kwargs))
    # The check itself must see the bug it guards against: the unfenced loop of the tile that failed.
    x, w = torch.empty(1024, 4096, dtype=torch.bfloat16), torch.empty(4096, 4096, dtype=torch.int8)
    s, out = torch.empty(4096), torch.empty(1024, 4096, dtype=torch.bfloat16)
    (fast, _, args, kwargs), = k._plan(x, w, s, None, out, 1024, 4096, 4096, k._mma_config(128, 128, 64, 8, 4))
    jobs.append(("control: unfenced", fast.fn, args, {**kwargs, "WGMMA_FENCE": False}))
    _SM90_JOBS[:] = jobs
    with multiprocessing.get_context("fork").Pool(min(4, os.cpu_count() or 1)) as pool:
        results = pool.map(_sm90_job, range(len(jobs)))
    failures = []
    for (what, *_), (regs, spills, shared, serialized, hazards) in zip(jobs, results):
        print(f"{what}: regs={regs} spill={spills} smem={shared} serialized={serialized} hazards={len(hazards)}")
        if what.startswith("control"):
            if not hazards:
                failures.append("the hazard check finds nothing in the unfenced 128x128x64/4-stage loop, which "
                                "had the hazard with triton 3.6: the check is broken, or triton changed (re-verify "
                                "the fence)")
        elif spills or shared > 232448 or hazards:
            failures.append(f"{what}: spills {spills} B, shared {shared} B, hazards {hazards[:3]}")
    print("\n".join(failures) if failures else "ok")
    sys.exit(1 if failures else 0)


_SM90_JOBS: list = []  # filled before the worker processes fork


def _sm90_job(i: int) -> tuple:
    _, fn, args, kwargs = _SM90_JOBS[i]
    compiled = _sm90_compile(fn, args, kwargs)
    info, sass = _sm90_tools(compiled)
    regs = int(re.search(r"Used (\d+) registers", info).group(1))
    spills = int(re.search(r"(\d+) bytes spill stores", info).group(1))
    serialized = "C7515" in info  # ptxas serialized the wgmmas: correct, but slow
    return regs, spills, compiled.metadata.shared, serialized, hgmma_register_hazards(sass)


@pytest.mark.slow
def test_every_shipped_launch_compiles_for_sm90_without_wgmma_hazards():
    """Every launch the sweep can pick (and the defaults with fp16/fp32/bias/unaligned K) compiles for
    sm_90 with the ptxas that ships with triton: no spills, ≤ 227 KB shared memory, and no register
    of an in-flight wgmma rewritten — checked on the SASS that the GPU runs."""
    run_sm90_check("from tests.kernels.test_int8_weight_only import _sm90_check_main; _sm90_check_main()")


def run_sm90_check(code: str) -> None:
    """Run ``code`` (a ``*_main`` that compiles for sm_90 and prints 'ok' last) in a subprocess without
    TRITON_INTERPRET; skip where triton has no NVIDIA backend or no ptxas / nvdisasm."""
    try:
        import triton.backends.nvidia  # noqa: F401
        import triton

        bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    except ImportError:
        pytest.skip("triton has no NVIDIA backend here")
    if not all(os.path.exists(os.path.join(bin_dir, t)) for t in ("ptxas", "nvdisasm")):
        pytest.skip("triton's ptxas / nvdisasm are not available")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {key: v for key, v in os.environ.items() if key != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-6000:] + proc.stderr[-4000:]


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


def _assert_correct_and_repeatable(x, weight_q, weight_scale, bias, config, exact, bound, what):
    """Within the float32 bound, and bit-identical over two more runs (a deterministic kernel: any
    difference is a race)."""
    k = _module()
    y = k.linear(x, weight_q, weight_scale, bias, config=config)
    _assert_within(y, exact, bound, what)
    for _ in range(2):
        again = k.linear(x, weight_q, weight_scale, bias, config=config)
        differ = again != y
        assert not differ.any(), f"{what}: {int(differ.sum())} outputs change between runs, first at " \
                                 f"{differ.nonzero()[:3].tolist()}"


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 16, 128, 1024])
@pytest.mark.parametrize("N,K", LLAMA, ids=[f"{n}x{kk}" for n, kk in LLAMA])
def test_gpu_llama_shapes(llama_weights, N, K, M):
    """The config the layer runs (shipped table or default) against the reference and the truth."""
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
@pytest.mark.parametrize("M", [1, 16, 128, 1024])
def test_gpu_other_activation_dtypes(llama_weights, dtype, M):
    """fp16 through the fp16 paths; fp32 through the exact-float32 GEMV and the tf32x3 tensor-core
    kernels, whose extra error is ~2⁻²¹ per product: the 2⁻¹⁹ allowance below is 4x that, while plain
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
def test_gpu_untuned_shapes_run_their_defaults():
    """Shapes without a tuned entry take default_config: at M = 1-4 the DIAG decode programs, at wide N and
    5 <= M <= 16 the decode kernel (N and K off its tiles, a bias, both 16-bit types), within the float32
    bound of the exact products."""
    k = _module()
    for m, n, kk, dtype in [(1, 8200, 1088, torch.bfloat16), (2, 8200, 1088, torch.float16),
                            (3, 1000, 4160, torch.bfloat16), (9, 9000, 2048, torch.bfloat16),
                            (16, 8192, 1000, torch.float16)]:
        x, weight_q, weight_scale, bias = _layer_inputs(m, n, kk, dtype, "cuda", bias=True)
        assert k.default_config(m, n, kk)["kernel"] == "decode"
        y = k.linear(x, weight_q, weight_scale, bias)
        _assert_within_fp32_bound(y, x, weight_q, weight_scale, bias, f"default M={m} {n}x{kk} {dtype}")


@pytest.mark.gpu
def test_gpu_every_shipped_config_is_correct():
    """Each config of the shipped table for this GPU, on its own problem (M = the bucket)."""
    from quantkit.kernels import tuning

    k = _module()
    table = tuning._shipped(k.FAMILY)
    problems = [(tuple(int(v) for v in key.split(",")), cfg) for key, cfg in table.items()]
    if not problems:  # nothing shipped yet: at least every default of the benchmark cells
        problems = [((m, n, kk), k.default_config(m, n, kk)) for m, n, kk in _bench_cells()]
    weights: dict = {}
    for (m, n, kk), cfg in problems:
        if (n, kk) not in weights:
            weights[(n, kk)] = quantize_weight_int8_per_channel(torch.randn(n, kk, device="cuda") * 0.02)
        weight_q, weight_scale = weights[(n, kk)]
        x = torch.randn(m, kk, device="cuda").to(torch.bfloat16)
        exact, bound = _fp32_bound(x, weight_q, weight_scale, None, torch.bfloat16)
        _assert_correct_and_repeatable(x, weight_q, weight_scale, None, cfg, exact, bound, f"M={m} {n}x{kk} {cfg}")


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("M", [1, 16, 128, 1024, 4096])
@pytest.mark.parametrize("N,K", LLAMA, ids=[f"{n}x{kk}" for n, kk in LLAMA])
def test_gpu_every_candidate_config_is_correct(llama_weights, N, K, M):
    """Whatever the offline sweep picks is correct: every candidate (and the default) of every
    benchmark cell, on that cell's own shape — many tiles in flight at M = 1024/4096, where the
    round-1 race showed — within the bound and bit-identical over three runs. Mostly compilation
    time, with the specializations of the sweep, which then finds them in Triton's cache."""
    k = _module()
    _, weight_q, weight_scale = llama_weights[(N, K)]
    x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    exact, bound = _fp32_bound(x, weight_q, weight_scale, None, torch.bfloat16)
    for cfg in k.candidate_configs(M, N, K):
        _assert_correct_and_repeatable(x, weight_q, weight_scale, None, cfg, exact, bound, f"M={M} {N}x{K} {cfg}")


def _small_model():
    """Shapes that take the three kernels at M = 1, 16 and 300 with the defaults; ReLU keeps
    compiled and eager outputs bit-identical."""
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


@pytest.mark.gpu
def test_gpu_split_k_under_cuda_graph():
    """The split-K path (workspace from the caching allocator + epilogue launch) captured in a graph."""
    k = _module()
    weight_q, weight_scale = quantize_weight_int8_per_channel(torch.randn(256, 4096, device="cuda") * 0.02)
    cfg = k._mma_default(32, 4096, 4096)  # a split-K config whose compilation the SASS check covers
    assert cfg["kernel"] == "mma" and cfg["SPLIT_K"] > 1
    static_x = torch.randn(32, 4096, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            k.linear(static_x, weight_q, weight_scale, config=cfg)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = k.linear(static_x, weight_q, weight_scale, config=cfg)
    static_x.copy_(torch.randn_like(static_x))
    graph.replay()
    torch.testing.assert_close(static_y, k.linear(static_x, weight_q, weight_scale, config=cfg), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sdtype", (torch.float32, torch.bfloat16))
def test_dequantize_weight_exact(kernel_device, dtype, sdtype):
    """The weight the input gradient multiplies by: q · s rounded once to ``dtype``, as the reference;
    edge tiles along both N (70 rows, 32-row tiles) and K (300 columns, 256-column tiles)."""
    from quantkit.reference.int8 import dequantize_weight_int8

    k = _module()
    q = torch.randint(-128, 128, (70, 300), dtype=torch.int8, device=kernel_device)
    s = (torch.rand(70, device=kernel_device) * 1e-3 + 1e-6).to(sdtype)
    got = k.dequantize_weight(q, s, dtype)
    want = dequantize_weight_int8(q, s, dtype)
    assert got.dtype == dtype and got.shape == (70, 300)
    _assert_same_as_reference(got, want, dequantize_weight_int8(q, s, torch.float32), f"dequantize {dtype}")
    assert torch.equal(k.dequantize_weight(q, s[:, None], dtype), got)  # [N, 1] scales, as checkpoints have
    with pytest.raises(ValueError, match="weight_scale must hold 70"):
        k.dequantize_weight(q, s[:69], dtype)
