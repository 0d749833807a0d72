"""Every default launch of every family fits an sm_89 GPU's shared memory (99 KB a block, as sm_86), as
launched or after the launcher's retry with fewer pipeline stages (quantkit.kernels.launch).

The tuned tables and defaults are sized for an H100 (227 KB). Where no Gluon kernel can run, the Triton
fallbacks run, and several of them need more than 99 KB at their stage counts (fp8-block's decode-size
kernels, int8 weight-only's and int4's tiles at M = 16-256: Triton then refuses to load them). On the CPU
the launches are recorded instead of run (every cached kernel of the four families replaced by a
recorder), compiled for sm_89 with the ptxas that ships with triton, and their shared memory compared with
the limit, stepping ``num_stages`` down as the launcher would.
"""
import sys

import pytest
import torch

from tests.kernels.test_int8_weight_only import _sm90_compile, run_sm90_check

SM89_SHARED = 101376  # bytes a block may opt in to on sm_86 / sm_89


def _record_default_launches():
    """[(family, M, kernel name, jit function, args, kwargs)] of each family's default config at the
    benchmark's M values on 4096², with CPU tensors and the kernels recorded, not run."""
    from quantkit.kernels import fp8_block as F
    from quantkit.kernels import int4_weight_only as Q
    from quantkit.kernels import int8_dynamic as I
    from quantkit.kernels import int8_weight_only as W
    from quantkit.kernels import workspace
    from quantkit.kernels.launch import CachedKernel
    from quantkit.reference.int4 import quantize_weight_int4
    from quantkit.reference.int8 import quantize_weight_int8_per_channel

    calls = []

    class Recorder:
        def __init__(self, cached):
            self.cached = cached

        def __getitem__(self, grid):
            return lambda *args, **kwargs: calls.append((self.cached.fn, args, kwargs))

    for mod in (F, I, W, Q, workspace):
        for name in dir(mod):
            if isinstance(getattr(mod, name), CachedKernel):
                setattr(mod, name, Recorder(getattr(mod, name)))
    I._INTERPRET = Q._INTERPRET = True  # (only lets their input checks take CPU tensors)
    # int8-dynamic asks the device whether it has TMA (and programmatic dependent launch): an sm_89 GPU says no
    # (the CPU's answer is the interpreter's, yes), so its TMA GEMMs and PDL launches are not recorded
    I._device_facts = lambda index: (False, 128)

    n = k = 4096
    w = (torch.randn(n, k) * 0.02).to(torch.bfloat16)
    w8, s8 = quantize_weight_int8_per_channel(w)
    w4, s4, z4 = quantize_weight_int4(w, 128, False, torch.bfloat16)
    wf, sf = torch.empty(n, k, dtype=torch.float8_e4m3fn), torch.ones(n // 128, k // 128)
    families = {
        "fp8-block": (F, lambda x, cfg: F.linear(x, wf, sf, None, config=cfg)),
        "int8-dynamic": (I, lambda x, cfg: I.linear(x, w8, s8, None, config=cfg)),
        "int8-weight-only": (W, lambda x, cfg: W.linear(x, w8, s8, None, config=cfg)),
        "int4-weight-only": (Q, lambda x, cfg: Q.linear(x, w4, s4, z4, None, 128, config=cfg)),
    }
    out = []
    for family, (mod, run) in families.items():
        for m in (1, 16, 64, 128, 256, 1024, 4096):
            calls.clear()
            run(torch.randn(m, k).to(torch.bfloat16), mod.default_config(m, n, k))
            assert calls, f"{family} M={m}: no launch recorded"
            out += [(family, m, fn.__name__, fn, args, kwargs) for fn, args, kwargs in calls]
    return out


def _main() -> None:
    """Print each launch's shared memory on sm_89 (and the stage count the retry reaches); 'ok' last."""
    failures, retried = [], 0
    for family, m, name, fn, args, kwargs in _record_default_launches():
        stages = kwargs.get("num_stages")
        shared = _sm90_compile(fn, args, kwargs, 89).metadata.shared
        note = ""
        while shared > SM89_SHARED and isinstance(stages, int) and stages > 1:
            stages -= 1
            shared = _sm90_compile(fn, args, {**kwargs, "num_stages": stages}, 89).metadata.shared
            note = f" (after the retry: num_stages={stages})"
        retried += bool(note)
        print(f"{family} M={m} {name}: {shared} B{note}")
        if shared > SM89_SHARED:
            failures.append(f"{family} M={m} {name}: {shared} B")
    assert retried, "no launch needed the retry: update this test's docstring (or the check is broken)"
    if failures:
        print("FAILED:", failures)
        sys.exit(1)
    print("ok")


@pytest.mark.slow
def test_every_default_launch_fits_sm89_shared_memory():
    run_sm90_check("from tests.kernels.test_small_smem_gpus import _main; _main()")
