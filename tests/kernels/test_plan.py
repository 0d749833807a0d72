"""Launch plans (quantkit/kernels/plan.py): a replay makes exactly the launches a normal call would.

The CPU tests drive the recorder with a fake compiled kernel whose launcher records what it is given
(addresses as integers), so a normal call and a replay can be compared argument by argument. The GPU
tests replay the real kernels of every recipe and compare outputs bit for bit.
"""
import pytest
import torch

from quantkit.kernels import plan as plan_mod


class FakeLauncher:
    global_scratch_size = 0
    profile_scratch_size = 0
    launch_cooperative_grid = False
    launch_pdl = False

    def __init__(self):
        self.calls = []

    def launch(self, *args):
        self.calls.append(args)


class FakeKernel:
    def __init__(self, function):
        self.run = FakeLauncher()
        self.function = function
        self.packed_metadata = (4, 1, 0)


STREAM = 1234
K1, K2 = FakeKernel(11), FakeKernel(22)
CONSTANT = torch.arange(8)  # a module-level tensor a kernel reads: baked in and kept alive


def _launch(kernel, grid, values):
    """What launch.CachedKernel does: tell the recorder, then launch with the tensors' addresses."""
    plan_mod.note_launch(kernel, grid, values)
    ptrs = [v.data_ptr() if isinstance(v, torch.Tensor) else v for v in values]
    grid = tuple(grid) + (1,) * (3 - len(grid))
    kernel.run.launch(*grid, STREAM, kernel.function, False, False, None, None, kernel.packed_metadata,
                      None, None, None, *ptrs)


def fake_linear(x, weight, scale, bias, flag):
    m, k = x.shape
    n = weight.shape[0]
    y = torch.empty(m, n, dtype=x.dtype)
    scratch = torch.empty(64 + m * k, dtype=torch.uint8)
    x_q = scratch[64:].view(m, k)  # a view at an offset into the scratch buffer
    _launch(K1, (m,), [x, x_q, scratch, m, k, x.stride(0), "C", flag])
    _launch(K2, (n // 4, 2), [x_q, weight, scale, y, bias if bias is not None else y, CONSTANT, m, n, 0.5])
    return y


def _args():
    weight = torch.randn(16, 32)
    return weight, torch.rand(16), torch.randn(16), True


def _symbolic(call, roots):
    """A launcher call with every address replaced by (name of its buffer, offset), where known."""
    out = []
    for a in call:
        if isinstance(a, int) and not isinstance(a, bool) and a > 2**20:
            for name, (base, size) in roots.items():
                if base <= a < base + size:
                    a = (name, a - base)
                    break
        out.append(a)
    return out


def test_replay_makes_the_launches_a_normal_call_makes(monkeypatch):
    monkeypatch.setattr(plan_mod, "_current_stream", lambda: STREAM)
    weight, scale, bias, flag = _args()
    x = torch.randn(5, 32)
    y, plan = plan_mod._record(fake_linear, x, (weight, scale, bias, flag))
    assert isinstance(plan, plan_mod.Plan), plan
    assert plan.allocations == [((5, 16), (16, 1), torch.float32), ((64 + 5 * 32,), (1,), torch.uint8)]
    assert CONSTANT in [t for t in plan.keep_alive]

    for trial in range(3):
        K1.run.calls.clear()
        K2.run.calls.clear()
        x_new = torch.randn(7, 5, 32)[trial + 1]  # a different buffer, same shape and strides
        y_ref = fake_linear(x_new, weight, scale, bias, flag)
        normal = [K1.run.calls[-1], K2.run.calls[-1]]
        y_new = plan.replay(x_new, (weight, scale, bias, flag))
        replayed = [K1.run.calls[-1], K2.run.calls[-1]]
        assert y_new.shape == y_ref.shape and y_new.dtype == y_ref.dtype
        assert y_new.data_ptr() != y_ref.data_ptr()
        # The scratch buffers differ between the two calls; everything else is identical once each
        # address is named by its buffer and offset.
        scratch_normal = normal[0][13 + 2]
        scratch_replay = replayed[0][13 + 2]
        roots_normal = {"x": (x_new.data_ptr(), 5 * 32 * 4), "y": (y_ref.data_ptr(), 5 * 16 * 4),
                        "scratch": (scratch_normal, 64 + 5 * 32)}
        roots_replay = {"x": (x_new.data_ptr(), 5 * 32 * 4), "y": (y_new.data_ptr(), 5 * 16 * 4),
                        "scratch": (scratch_replay, 64 + 5 * 32)}
        for a, b in zip(normal, replayed):
            assert _symbolic(a, roots_normal) == _symbolic(b, roots_replay)
        # Layer buffers and the constant keep their addresses.
        assert replayed[1][13 + 1] == weight.data_ptr() and replayed[1][13 + 5] == CONSTANT.data_ptr()
        assert replayed[1][13 + 4] == bias.data_ptr()


def test_gluon_host_descriptors_are_rebuilt_on_the_new_addresses(monkeypatch):
    """The Gluon weight-only kernels take host TMA descriptors of x and of the weight: at replay the
    launcher gets descriptors with the same shape, strides and block on the new x (the weight's is a
    layer buffer and keeps its address)."""
    gluon_hopper = pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    from quantkit.kernels import wo_gemm_sm90 as g

    monkeypatch.setattr(plan_mod, "_current_stream", lambda: STREAM)
    weight = torch.randn(16, 32).to(torch.int8)

    def gluon_linear(x, weight):
        y = torch.empty(x.shape[0], weight.shape[0], dtype=x.dtype)
        x_desc = gluon_hopper.TensorDescriptor(x, list(x.shape), list(x.stride()), [64, 32],
                                               g._smem_layout(64, 32, g.gl.bfloat16))
        w_desc = gluon_hopper.TensorDescriptor(weight, list(weight.shape), list(weight.stride()), [16, 32],
                                               g._smem_layout(16, 32, g.gl.int8))
        _launch(K1, (1,), [x_desc, w_desc, y, x.shape[0]])
        return y

    _, plan = plan_mod._record(gluon_linear, torch.randn(5, 32).to(torch.bfloat16), (weight,))
    assert isinstance(plan, plan_mod.Plan), plan
    x_new = torch.randn(9, 32).to(torch.bfloat16)[2:7]
    y = plan.replay(x_new, (weight,))
    x_desc, w_desc, y_ptr, m = K1.run.calls[-1][13:]
    assert x_desc.base.data_ptr() == x_new.data_ptr() and list(x_desc.shape) == [5, 32]
    assert list(x_desc.strides) == [32, 1] and list(x_desc.block_shape) == [64, 32]
    assert w_desc.base.data_ptr() == weight.data_ptr() and list(w_desc.block_shape) == [16, 32]
    assert y_ptr == y.data_ptr() and m == 5


def test_descriptor_launches_replay_flat_with_only_the_calls_maps_encoded(monkeypatch):
    """Triton's launcher for a kernel with host TMA descriptors is a Python wrapper that encodes every
    descriptor on every call. A replay calls the compiled launcher under it with the same flat arguments
    the wrapper would pass: the layer buffer's map encoded once at record time, the maps of the call's
    own buffers (x, the output) encoded again on their new addresses, nothing else re-derived."""
    driver = pytest.importorskip("triton.backends.nvidia.driver")
    gluon_hopper = pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    from quantkit.kernels import wo_gemm_sm90 as g

    encoded = []

    def fake_fill(ptr, swizzle, elem_size, dtype, block, shape, strides, padding):
        encoded.append(ptr)
        return ("map", ptr, swizzle, elem_size, dtype, tuple(block), tuple(shape), tuple(strides), padding)

    def fake_make(arg, meta):  # Triton's make_tensordesc_arg, its driver call replaced
        shape = list(arg.shape)
        if meta["fp4_padded"]:
            shape[-1] *= 2
        return [fake_fill(arg.base.data_ptr(), meta["swizzle"], meta["elem_size"],
                          driver.TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]], meta["block_size"], shape,
                          list(arg.strides), 1 if arg.padding == "nan" else 0), *shape, *arg.strides]

    monkeypatch.setattr(driver, "make_tensordesc_arg", fake_make)
    monkeypatch.setattr(plan_mod, "_fill_tma", fake_fill)
    monkeypatch.setattr(plan_mod, "_current_stream", lambda: STREAM)
    raw = FakeLauncher()
    meta = [{"swizzle": 3, "elem_size": 2, "elem_type": 9, "block_size": [64, 32], "fp4_padded": False},
            {"swizzle": 2, "elem_size": 1, "elem_type": 0, "block_size": [16, 32], "fp4_padded": True},
            {"swizzle": 3, "elem_size": 2, "elem_type": 9, "block_size": [64, 16], "fp4_padded": False}]
    signature = {"x_desc": "tensordesc<bf16[64, 32]>", "w_desc": "tensordesc<i8[16, 32]>", "scale": "*fp32",
                 "y_desc": "tensordesc<bf16[64, 16]>", "M": "i32", "BLOCK": "constexpr"}
    kernel = FakeKernel(33)
    kernel.run.launch = driver.wrap_handle_tensordesc(raw.launch, signature, meta)
    weight = torch.randn(16, 32).to(torch.int8)
    scale = torch.rand(16)

    def gluon_linear(x, weight, scale):
        y = torch.empty(x.shape[0] + 1, weight.shape[0], dtype=x.dtype)[1:]  # a map at an offset into its block
        x_desc = gluon_hopper.TensorDescriptor(x, list(x.shape), list(x.stride()), [64, 32],
                                               g._smem_layout(64, 32, g.gl.bfloat16))
        w_desc = gluon_hopper.TensorDescriptor(weight, list(weight.shape), list(weight.stride()), [16, 32],
                                               g._smem_layout(16, 32, g.gl.int8))
        y_desc = gluon_hopper.TensorDescriptor(y, list(y.shape), list(y.stride()), [64, 16],
                                               g._smem_layout(64, 16, g.gl.bfloat16))
        _launch(kernel, (2, 1), [x_desc, w_desc, scale, y_desc, x.shape[0], 64])
        return y

    _, plan = plan_mod._record(gluon_linear, torch.randn(5, 32).to(torch.bfloat16), (weight, scale))
    assert isinstance(plan, plan_mod.Plan), plan
    (step,) = plan.steps
    assert step[1] == raw.launch and len(step[6]) == 2  # the compiled launcher; two maps a call
    for trial in range(2):
        x_new = torch.randn(9, 32).to(torch.bfloat16)[2 + trial:7 + trial]
        y_ref = gluon_linear(x_new, weight, scale)  # through the wrapper
        normal = raw.calls[-1]
        encoded.clear()
        y = plan.replay(x_new, (weight, scale))
        replayed = raw.calls[-1]
        assert encoded == [x_new.data_ptr(), y.data_ptr()]  # the weight's map is not encoded again
        assert len(normal) == len(replayed) == 13 + 3 * (1 + 2 + 2) + 3
        roots = lambda y_: {"x": (x_new.data_ptr(), 5 * 32 * 2), "y": (y_.data_ptr() - 32, 6 * 16 * 2)}  # noqa: E731

        def named(call, y_):
            return [tuple(_symbolic(list(a), roots(y_))) if isinstance(a, tuple) else a
                    for a in _symbolic(list(call), roots(y_))]

        assert named(normal, y_ref) == named(replayed, y)
        assert replayed[13 + 5][1] == weight.data_ptr() and replayed[13 + 5][6] == (16, 64)  # fp4-padded shape


def test_bias_none_points_at_the_new_output(monkeypatch):
    monkeypatch.setattr(plan_mod, "_current_stream", lambda: STREAM)
    weight, scale, _, flag = _args()
    _, plan = plan_mod._record(fake_linear, torch.randn(3, 32), (weight, scale, None, flag))
    y = plan.replay(torch.randn(3, 32), (weight, scale, None, flag))
    call = K2.run.calls[-1]
    assert call[13 + 3] == y.data_ptr() and call[13 + 4] == y.data_ptr()


def fake_experts(x, index, weights, stack, flag):
    """The MoE experts' shape of call: three per-call inputs, one allocation split into several outputs."""
    buffer = torch.empty(3 * index.numel() + 1, dtype=torch.int32)
    order, blocks, count = buffer.split([2 * index.numel(), index.numel(), 1])  # aten::split_with_sizes: views
    _launch(K1, (1,), [index.reshape(-1), order, blocks, count, index.numel(), flag])
    y = torch.empty(x.shape[0], stack.shape[-1], dtype=x.dtype)
    _launch(K2, (x.shape[0], 2), [x, order, blocks, count, stack, weights, y, CONSTANT])
    return y


def test_several_inputs_are_roots_read_at_their_new_addresses(monkeypatch):
    monkeypatch.setattr(plan_mod, "_current_stream", lambda: STREAM)
    stack = torch.randn(4, 32, 16)
    inputs = (torch.randn(5, 32), torch.randint(0, 4, (5, 2)), torch.rand(5, 2))
    _, plan = plan_mod._record(fake_experts, inputs, (stack, True))
    assert isinstance(plan, plan_mod.Plan), plan
    assert plan.allocations == [((31,), (1,), torch.int32), ((5, 16), (16, 1), torch.float32)]
    for _ in range(2):
        new = (torch.randn(5, 32), torch.randint(0, 4, (5, 2)), torch.rand(5, 2))
        y_ref = fake_experts(*new, stack, True)
        normal = [K1.run.calls[-1], K2.run.calls[-1]]
        buffer_normal = normal[0][13 + 1]
        y_new = plan.replay(new, (stack, True))
        replayed = [K1.run.calls[-1], K2.run.calls[-1]]
        buffer_replay = replayed[0][13 + 1]
        names = {"x": new[0], "index": new[1], "weights": new[2]}
        roots_normal = {k: (v.data_ptr(), v.numel() * v.element_size()) for k, v in names.items()}
        roots_replay = dict(roots_normal)
        roots_normal.update(buffer=(buffer_normal, 31 * 4), y=(y_ref.data_ptr(), 5 * 16 * 4))
        roots_replay.update(buffer=(buffer_replay, 31 * 4), y=(y_new.data_ptr(), 5 * 16 * 4))
        for a, b in zip(normal, replayed):
            assert _symbolic(a, roots_normal) == _symbolic(b, roots_replay)
        # each input at its own new address, the split outputs at their offsets in the new block
        assert replayed[0][13] == new[1].data_ptr() and replayed[1][13] == new[0].data_ptr()
        assert replayed[1][13 + 5] == new[2].data_ptr() and replayed[1][13 + 4] == stack.data_ptr()
        assert replayed[1][13 + 2] == buffer_replay + 20 * 4 and replayed[1][13 + 3] == buffer_replay + 30 * 4


def test_inputs_sharing_storage_are_not_planned():
    """A replay takes each input's address on its own, so a recording in which two inputs were views of one
    block would bake in their distance."""
    routing = torch.rand(20)
    _, plan = plan_mod._record(fake_experts, (torch.randn(5, 32), routing[:10].view(5, 2), routing[10:].view(5, 2)),
                               (torch.randn(4, 32, 16), True))
    assert plan == "inputs share storage"


def test_cublas_ops_are_replayed_on_views_of_the_new_buffers(monkeypatch):
    """A call that quantizes (a launch into scratch) and then calls cuBLAS (here ``addmm`` on views of
    x, a declared buffer and a slice): the replay re-issues the op on the new x."""
    monkeypatch.setattr(plan_mod, "_current_stream", lambda: STREAM)
    weight, _, bias, _ = _args()

    def fn(x, weight, bias):
        scratch = torch.empty(4 * x.shape[0], dtype=torch.uint8)
        _launch(K1, (1,), [x, scratch])
        return torch.addmm(bias[:16], x[:, 2:], weight[:, 2:].t())  # aten::t, slices: views

    x = torch.randn(6, 32)
    y, plan = plan_mod._record(fn, x, (weight, bias))
    assert isinstance(plan, plan_mod.Plan), plan
    for _ in range(2):
        x_new = torch.randn(6, 32)
        weight_new = torch.randn(16, 32)  # the replay reads the buffers it is given
        y_new = plan.replay(x_new, (weight_new, bias))
        torch.testing.assert_close(y_new, fn(x_new, weight_new, bias), rtol=0, atol=0)
        assert K1.run.calls[-1][13] == x_new.data_ptr()


def test_out_form_cublas_ops_write_into_the_new_output_block(monkeypatch):
    """fp8's cuBLAS path: scratch and output in one block, cuBLAS writing into the output view (an
    ``out=`` op). The replay re-makes the block and re-issues the op into the new view; an out= op
    into a tensor the call did not create is not planned."""
    monkeypatch.setattr(plan_mod, "_current_stream", lambda: STREAM)
    weight, _, bias, _ = _args()

    def fn(x, weight, bias):
        m = x.shape[0]
        buf = torch.empty(m * 16 + 64, dtype=x.dtype)
        y = buf[:m * 16].view(m, 16)
        _launch(K1, (1,), [x, buf.view(torch.uint8)[m * 64:]])
        torch.addmm(bias[:16], x, weight.t(), out=y)
        return y

    x = torch.randn(6, 32)
    y, plan = plan_mod._record(fn, x, (weight, bias))
    assert isinstance(plan, plan_mod.Plan), plan
    for _ in range(2):
        x_new = torch.randn(6, 32)
        y_new = plan.replay(x_new, (weight, bias))
        assert K1.run.calls[-1][13 + 1] == y_new.data_ptr() + 6 * 64  # the scratch behind the new output
        assert y_new.untyped_storage().nbytes() == y.untyped_storage().nbytes() and y_new.data_ptr() != y.data_ptr()
        torch.testing.assert_close(y_new, fn(x_new, weight, bias), rtol=0, atol=0)

    outside = torch.empty(6, 16)

    def into_outside(x, weight, bias):
        _launch(K1, (1,), [x, outside])
        torch.addmm(bias[:16], x, weight.t(), out=outside)
        return outside.view(6, 16)

    _, plan = plan_mod._record(into_outside, x, (weight, bias))
    assert not isinstance(plan, plan_mod.Plan)


@pytest.mark.parametrize("tail", [0, 1])
def test_ops_on_views_of_a_block_through_another_dtype(monkeypatch, tail):
    """fp8's cuBLAS path reads its fp8 codes and float32 scales from a bf16 block: an op argument (here
    the out= tensor) that views a block's bytes as another dtype, at a byte offset, is rebuilt on the
    new block at the same bytes (a block of whole float64s, and one with a 4-byte tail)."""
    monkeypatch.setattr(plan_mod, "_current_stream", lambda: STREAM)
    weight = torch.randn(16, 32, dtype=torch.float64)

    def fn(x, weight):
        buf = torch.empty(16 + 2 * 6 * 16 + tail, dtype=torch.float32)
        _launch(K1, (1,), [x, buf])
        torch.mm(x, weight.t(), out=buf[16:16 + 2 * 6 * 16].view(torch.float64).view(6, 16))  # 64 bytes in
        return buf

    y, plan = plan_mod._record(fn, torch.randn(6, 32, dtype=torch.float64), (weight,))
    assert isinstance(plan, plan_mod.Plan), plan
    x_new = torch.randn(6, 32, dtype=torch.float64)
    buf = plan.replay(x_new, (weight,))
    assert buf.dtype == torch.float32 and buf.shape == y.shape
    torch.testing.assert_close(buf[16:16 + 2 * 6 * 16].view(torch.float64).view(6, 16), x_new @ weight.t(),
                               rtol=0, atol=0)


def test_an_output_that_views_a_larger_allocation_is_replayed_as_that_view(monkeypatch):
    """The decode paths keep their scratch behind the output in one allocation and return the leading
    view: the replay allocates the block again and returns the same view of it, which is also where
    the kernel wrote."""
    monkeypatch.setattr(plan_mod, "_current_stream", lambda: STREAM)

    def fn(x):
        m, k = x.shape
        buf = torch.empty(m * 16 + 40, dtype=x.dtype)
        y = buf[:m * 16].view(m, 16)
        scratch = buf.view(torch.uint8)[m * 64:]
        _launch(K1, (m,), [x, scratch, y])
        return y

    y, plan = plan_mod._record(fn, torch.randn(3, 32), ())
    assert isinstance(plan, plan_mod.Plan), plan
    y_new = plan.replay(torch.randn(3, 32), ())
    assert y_new.shape == y.shape and y_new.stride() == y.stride() and y_new.dtype == y.dtype
    assert y_new.untyped_storage().nbytes() == y.untyped_storage().nbytes()
    call = K1.run.calls[-1]
    assert call[13 + 2] == y_new.data_ptr() and call[13 + 1] == y_new.data_ptr() + 3 * 64


@pytest.mark.parametrize("view", ["offset", "columns"])
def test_output_views_keep_their_offset_and_strides(monkeypatch, view):
    """A view at an element offset into the allocation, and a strided column slice: the replay
    returns the same view of the new allocation (offset counted in elements, not bytes)."""
    monkeypatch.setattr(plan_mod, "_current_stream", lambda: STREAM)

    def fn(x):
        m = x.shape[0]
        buf = torch.empty(8 + m * 16, dtype=x.dtype)
        full = buf[8:].view(m, 16)
        _launch(K1, (m,), [x, full])
        return full if view == "offset" else full[:, :8]

    y, plan = plan_mod._record(fn, torch.randn(3, 32), ())
    assert isinstance(plan, plan_mod.Plan), plan
    y_new = plan.replay(torch.randn(3, 32), ())
    assert (y_new.shape, y_new.stride(), y_new.storage_offset()) == (y.shape, y.stride(), y.storage_offset())
    assert y.storage_offset() == 8
    # the kernel was handed the new allocation's view at the same element offset
    assert K1.run.calls[-1][13 + 1] == y_new.data_ptr()


@pytest.mark.parametrize("variant", ["torch_op", "other_dtype_view", "no_launch", "hook"])
def test_calls_that_cannot_be_replayed_are_not_planned(variant):
    weight, scale, bias, flag = _args()

    def fn(x, *args):
        if variant == "no_launch":
            return torch.empty(x.shape[0], 16)
        y = fake_linear(x, *args)
        if variant == "torch_op":
            y.add_(1.0)  # GPU work outside the recorded launches
        if variant == "other_dtype_view":
            return y.view(torch.int32)  # a view through another dtype: not an element offset of a root
        if variant == "hook":
            plan_mod.note_unplannable("a Triton launch hook is installed")
        return y

    y, plan = plan_mod._record(fn, torch.randn(4, 32), (weight, scale, bias, flag))
    assert isinstance(plan, str), variant
    assert isinstance(y, torch.Tensor)


def test_recording_is_off_outside_a_record():
    before = len(K1.run.calls)
    _launch(K1, (1,), [torch.zeros(4), 1])
    assert len(K1.run.calls) == before + 1
    assert getattr(plan_mod._state, "recording", None) is None


def test_planned_wrapper_runs_fn_for_cpu_inputs_and_keywords():
    calls = []

    def fn(x, *args, **kwargs):
        calls.append(kwargs)
        return x

    wrapped = plan_mod.planned(fn)
    x = torch.zeros(2, 2)
    for _ in range(3):
        wrapped(x, 1)
    wrapped(x, 1, config={"a": 1})
    assert len(calls) == 4 and calls[-1] == {"config": {"a": 1}}
    assert wrapped.plans == {}


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["fp8-block", "int8-dynamic", "int8-weight-only", "int4-weight-only"])
def test_planned_layers_match_unplanned_kernels_gpu(recipe):
    import importlib

    import quantkit

    torch.manual_seed(0)
    family = importlib.import_module(f"quantkit.kernels.{recipe.replace('-', '_')}")
    for n, k in [(4096, 4096), (1000, 1152), (4096, 14336)]:
        lin = torch.nn.Linear(k, n, bias=n == 1000, device="cuda", dtype=torch.bfloat16)
        torch.nn.init.normal_(lin.weight, std=0.02)
        layer = quantkit.quantize_linear(lin, recipe)
        # (M = 4096 at 4096²: int8-dynamic's warp-specialized GEMM, whose TMA-store descriptor is on the output)
        cells = [(m, torch.bfloat16) for m in (1, 16, 128, 1024, 4096)] + [(5, torch.float16), (300, torch.float16)]
        for m, dtype in cells:
            xs = torch.randn(4, m + 1, k, device="cuda", dtype=dtype)
            outs = []
            for trial in range(4):  # run, record, replay, replay
                x = xs[trial, 1:] if trial == 3 else xs[trial, :m]  # new buffers every time
                with torch.no_grad():
                    y = layer(x)
                outs.append((x, y))
            for x, y in outs:
                ref = family.linear(x, *layer.kernel_args())  # the module function: never planned
                assert torch.equal(y, ref), (recipe, n, k, m, dtype)
    from quantkit.ops.dispatch import resolve

    reasons = {str(r) for r in resolve(recipe.replace("-", "_"), "linear", torch.device("cuda", 0)).plans.values()
               if isinstance(r, str)}
    # Every call planned, the Gluon kernels' (host TMA descriptors rebuilt at replay) included.
    assert not reasons, f"{recipe}: calls not planned: {reasons}"



@pytest.mark.gpu
def test_plans_are_made_and_replay_under_cuda_graphs_gpu():
    import quantkit
    from quantkit.ops.dispatch import resolve

    torch.manual_seed(0)
    lin = torch.nn.Linear(4096, 4096, bias=False, device="cuda", dtype=torch.bfloat16)
    for recipe in quantkit.recipe_names():
        layer = quantkit.quantize_linear(lin, recipe)
        family = recipe.replace("-", "_")
        x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            for _ in range(3):
                y_eager = layer(x)
            impl = resolve(family, "linear", x.device)
            kinds = {type(p).__name__ for p in impl.plans.values()}
            assert "Plan" in kinds, (recipe, list(impl.plans.values()))
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y_graph = layer(x)
            x.copy_(torch.randn_like(x))
            g.replay()
            torch.testing.assert_close(y_graph, layer(x), rtol=0, atol=0)
        assert not torch.equal(y_graph, y_eager)


class _AsIfCuda(torch.Tensor):
    """A CPU tensor the wrapper takes for a CUDA one (its plan path runs on the fake launcher)."""

    @property
    def is_cuda(self):
        return True


def test_planned_wrapper_keys_leading_inputs_by_layout_and_replays_them(monkeypatch):
    """planned(fn, inputs=3): the first call runs fn, the second is recorded, later calls with new input tensors of
    the same layout replay (one key); a new stack address is a new key."""
    monkeypatch.setattr(plan_mod, "_enabled", lambda: True)
    monkeypatch.setattr(plan_mod, "_current_stream", lambda: STREAM)
    calls = []

    def fn(x, index, weights, stack, flag):
        calls.append(x.data_ptr())
        return fake_experts(x, index, weights, stack, flag)

    wrapped = plan_mod.planned(fn, inputs=3)
    stack = torch.randn(4, 32, 16)
    for trial in range(4):
        x = torch.randn(5, 32).as_subclass(_AsIfCuda)
        wrapped(x, torch.randint(0, 4, (5, 2)), torch.rand(5, 2), stack, True)
        assert K2.run.calls[-1][13] == x.data_ptr()  # the launch read this call's x, replayed or not
    assert len(calls) == 2  # run, record; then two replays
    assert len(wrapped.plans) == 1 and isinstance(next(iter(wrapped.plans.values())), plan_mod.Plan)
    wrapped(torch.randn(5, 32).as_subclass(_AsIfCuda), torch.randint(0, 4, (5, 2)), torch.rand(5, 2),
            torch.randn(4, 32, 16), True)
    assert len(calls) == 3  # another stack: a new key, run first
