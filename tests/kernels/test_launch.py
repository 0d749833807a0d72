"""The cached launcher: same kernels as Triton's own launch, keyed by what Triton specializes on."""
import pytest
import torch

from quantkit.kernels.launch import _arg_key, _spec

triton = pytest.importorskip("triton")
tl = triton.language


def test_spec_separates_what_triton_specializes_on():
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    base = torch.empty(64, dtype=torch.bfloat16)
    values = [1, 0, 16, 17, 2**31 - 1, 2**31, -5, 2**40, 2**63, True, 1.5, None,
              base, base[1:], base.float(), torch.empty(3, dtype=torch.float8_e4m3fn)]
    # Two values share a key only if Triton specializes them identically.
    for a in values:
        for b in values:
            if type(a) is not type(b):
                continue
            same_native = native_specialize_impl(BaseBackend, a, False, True, True) == \
                native_specialize_impl(BaseBackend, b, False, True, True)
            if _spec(a) == _spec(b) or _arg_key([a], [False]) == _arg_key([b], [False]):
                assert same_native, (a, b)
            assert _arg_key([a], [False]) == (_spec(a),)  # the inlined key is _spec's


def test_gluon_descriptors_key_like_their_triton_signature():
    """Two Gluon host descriptors share a key only if Triton's signature for them (dtype, block
    shape, shared layout) is the same: the launcher never reuses a kernel compiled for another."""
    gluon_hopper = pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    from triton.experimental.gluon import language as gl
    from triton.runtime.jit import mangle_type

    x = torch.empty(256, 256, dtype=torch.bfloat16)
    descs = []
    for dtype, block in ((gl.bfloat16, [128, 64]), (gl.bfloat16, [64, 64]), (gl.float16, [128, 64])):
        t = x if dtype == gl.bfloat16 else x.half()
        layout = gl.NVMMASharedLayout.get_default_for(block, dtype)
        descs.append(gluon_hopper.TensorDescriptor(t, list(t.shape), list(t.stride()), block, layout))
    descs.append(gluon_hopper.TensorDescriptor(x[:128], [128, 256], [256, 1], [128, 64],
                                               gl.NVMMASharedLayout.get_default_for([128, 64], gl.bfloat16)))
    for a in descs:
        for b in descs:
            assert (_spec(a) == _spec(b)) == (mangle_type(a) == mangle_type(b)), (a, b)


@pytest.mark.gpu
def test_cached_launch_matches_triton_launch():
    from quantkit.kernels.launch import cached

    @triton.jit
    def axpy(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
                 mask=mask)

    fast = cached(axpy)
    for n, offset in [(1000, 0), (1000, 1), (4096, 0), (17, 3), (1000, 0)]:
        x = torch.randn(n + offset, device="cuda")[offset:]
        y = torch.randn(n + offset, device="cuda")[offset:]
        out = torch.empty(n, device="cuda")
        fast[(triton.cdiv(n, 256),)](x, y, out, n, 2.0, BLOCK=256)
        torch.testing.assert_close(out, 2.0 * x + y, rtol=0, atol=1e-6)
    assert len(fast._compiled) >= 3  # aligned / misaligned pointers and n % 16 are distinct variants


def test_too_little_shared_memory_retries_with_fewer_stages(monkeypatch):
    """Where Triton refuses to load a kernel for want of shared memory (a config sized for an H100 on a
    99 KB GPU), the launch is retried with fewer pipeline stages, with a warning, and the stage count
    that fitted is remembered for the key; other resource errors and num_stages=1 are raised as they are."""
    from triton.runtime.errors import OutOfResources

    from quantkit.kernels import launch

    from triton.runtime.jit import JITFunction

    def kernel(x_ptr, n, BLOCK: tl.constexpr):
        pass

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    fast = launch.cached(JITFunction(kernel))  # (triton.jit gives an interpreted function under CI's interpreter)
    assert fast._fast
    calls = []

    class Triton:  # stands in for the JIT function: loads only at num_stages <= 2
        __name__ = "kernel"

        def __init__(self, limit_name="shared memory"):
            self.limit_name = limit_name

        def __getitem__(self, grid):
            def run(*args, **kwargs):
                calls.append(kwargs.get("num_stages"))
                if kwargs.get("num_stages", 3) > 2:
                    raise OutOfResources(147456, 101376, self.limit_name)
                return ("compiled", kwargs.get("num_stages"))
            return run

    fast.fn = Triton()
    x = torch.empty(16)
    with pytest.warns(RuntimeWarning) as record:
        assert fast[(1,)](x, 16, BLOCK=16, num_stages=4) == ("compiled", 2)
    assert [str(w.message).split(";")[1] for w in record] == [" retrying with num_stages=3 (same results, less load "
                                                              "pipelining)", " retrying with num_stages=2 (same "
                                                              "results, less load pipelining)"]
    assert "needs 147456 bytes of shared memory and this GPU allows 101376" in str(record[0].message)
    assert calls == [4, 3, 2]
    assert list(fast._stage_caps.values()) == [2]
    assert len(fast._compiled) == 1  # kept under the key of the launch as asked

    calls.clear()
    fast._compiled.clear()  # a key whose kernel is not cached yet starts at the stage count that fitted
    assert fast[(1,)](x, 16, BLOCK=16, num_stages=4) == ("compiled", 2)
    assert calls == [2]

    fast.fn = Triton("threads")
    with pytest.raises(OutOfResources):
        fast[(1,)](x, 32, BLOCK=32, num_stages=4)
    fast.fn = Triton()
    monkeypatch.setattr(Triton, "__getitem__", lambda self, grid: lambda *a, **k: (_ for _ in ()).throw(
        OutOfResources(1, 0, "shared memory")))
    with pytest.raises(OutOfResources):
        fast[(1,)](x, 48, BLOCK=48, num_stages=1)
