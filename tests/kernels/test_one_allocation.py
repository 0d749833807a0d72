"""One allocation a call, the output's, on the split-K paths of every family.

Split-K configs need float32 (or int32) partial sums beside the output. They are carved from the
output's own allocation (:func:`quantkit.kernels.workspace.out_with_workspace`), as the codes and
scales of the quantizing paths are. These tests watch every PyTorch allocation a call makes (the
dispatch mode the launch plans record with) on the interpreter or the GPU: exactly one, the returned
output its leading part; and the output still right (the families' own checks). On the GPU, fp8's
cuBLAS path too: ``_scaled_mm`` writes into the output (its out= form), bit for bit what it returned
when it allocated, and a launch plan replays it.
"""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from quantkit.kernels import launch
from quantkit.kernels import plan as plan_mod

fk = pytest.importorskip("quantkit.kernels.fp8_block")
ik = pytest.importorskip("quantkit.kernels.int8_dynamic")
k8 = pytest.importorskip("quantkit.kernels.int8_weight_only")
k4 = pytest.importorskip("quantkit.kernels.int4_weight_only")

from tests.kernels import test_fp8_block as tf8  # noqa: E402
from tests.kernels import test_int4_weight_only as t4  # noqa: E402
from tests.kernels import test_int8_dynamic as ti8  # noqa: E402
from tests.kernels import test_int8_weight_only as t8  # noqa: E402


class _Allocations(TorchDispatchMode):
    """Every tensor the host code allocates through PyTorch while active. Allocations inside a kernel
    launch are not the call's (Triton's interpreter copies arguments through PyTorch): paused there."""

    def __init__(self):
        super().__init__()
        self.tensors: list[torch.Tensor] = []
        self.paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.paused and plan_mod._op_name(func) in plan_mod._ALLOC_OPS:
            self.tensors.append(out)
        return out


@pytest.fixture
def one_allocation(monkeypatch):
    """``one_allocation(fn, what)``: runs fn, asserts it allocated one block and returned its leading
    part; returns (y, the block)."""
    watch = _Allocations()
    launch_items = launch.CachedKernel.__getitem__

    def paused_launch(self, grid):
        run = launch_items(self, grid)

        def call(*args, **kwargs):
            watch.paused += 1
            try:
                return run(*args, **kwargs)
            finally:
                watch.paused -= 1
        return call

    monkeypatch.setattr(launch.CachedKernel, "__getitem__", paused_launch)

    def check(fn, what):
        watch.tensors = []
        with watch:
            y = fn()
        allocs = watch.tensors
        assert len(allocs) == 1, f"{what}: {len(allocs)} allocations {[tuple(a.shape) for a in allocs]}"
        block = allocs[0]
        assert y.untyped_storage().data_ptr() == block.untyped_storage().data_ptr(), f"{what}: y not in the block"
        assert y.data_ptr() == block.data_ptr() and y.is_contiguous(), f"{what}: y is not the block's leading part"
        return y, block

    return check


@pytest.mark.parametrize("split", [2, 4])
def test_int8_weight_only_split_k_partials_live_behind_the_output(kernel_device, one_allocation, split):
    x, wq, ws, b = t8._layer_inputs(33, 70, 256, torch.bfloat16, kernel_device, bias=True)
    cfg = t8._mma(64, 32, 32, split=split)
    assert k8._partial_splits(x, 33, 70, 256, cfg) == split  # 8 K steps, split evenly
    y, block = one_allocation(lambda: k8.linear(x, wq, ws, b, config=cfg), f"int8wo split {split}")
    assert block.numel() * block.element_size() >= y.numel() * 2 + 4 * split * 33 * 70
    t8._assert_within_fp32_bound(y, x, wq, ws, b, f"int8wo split {split}")


def test_int8_weight_only_unsplit_mma_allocates_only_the_output(kernel_device, one_allocation):
    x, wq, ws, _ = t8._layer_inputs(33, 70, 320, torch.float16, kernel_device)
    cfg = t8._mma(64, 32, 32)
    assert k8._partial_splits(x, 33, 70, 320, cfg) == 1
    y, block = one_allocation(lambda: k8.linear(x, wq, ws, config=cfg), "int8wo unsplit")
    assert block.numel() == y.numel()


@pytest.mark.parametrize("split", [2, 4])
def test_int4_split_k_partials_live_behind_the_output(kernel_device, one_allocation, split):
    m, n, k, g = 33, 70, 256, 32
    x, packed, scale, zero, b, _ = t4.make_problem(m, n, k, g, torch.bfloat16, kernel_device, bias=True)
    cfg = k4._mma(32, 64, 32, split, 4, 2, False)
    assert k4._mma_split(x, g, cfg) == split
    y, block = one_allocation(lambda: k4.linear(x, packed, scale, zero, b, g, config=cfg),
                                     f"int4 split {split}")
    assert block.numel() * block.element_size() >= y.numel() * 2 + 4 * split * m * n
    ran = t4.ran(cfg, x, packed, scale, g)
    wdt = torch.bfloat16 if t4.rounds_weight(ran, x) else torch.float32
    t4.assert_output(y, t4.reference64(x, packed, scale, zero, b, g, wdt), f"int4 split {split}", t4.tc_steps(ran, k))


@pytest.mark.parametrize("split", [2, 4])
def test_fp8_swap_split_k_partials_live_behind_the_output(kernel_device, one_allocation, split):
    x, _, weight_q, weight_scale, b = tf8.make_problem(33, 70, 1024, torch.bfloat16, True, kernel_device)
    cfg = fk._swap(32, 16, 1, 4, 2, False, split_k=split)
    assert fk._split_count(cfg, 1024, 128, False) == split
    y, _ = one_allocation(lambda: fk.linear(x, weight_q, weight_scale, b, config=cfg), f"fp8 split {split}")
    tf8.check_linear(x, weight_q, weight_scale, b, f"fp8 split {split}", config=cfg)
    assert torch.equal(y, fk.linear(x, weight_q, weight_scale, b, config=cfg))
    x_q, x_s = fk.quantize_act(x)
    y_gemm, _ = one_allocation(lambda: fk.gemm(x_q, x_s, weight_q, weight_scale, b, torch.bfloat16,
                                                        config=cfg), f"fp8 gemm split {split}")
    assert torch.equal(y_gemm, y)


def test_int8_dynamic_gemm_split_k_partials_live_behind_the_output(kernel_device, one_allocation):
    x, wq, ws, b = ti8.make_problem(40, 96, 512, torch.float16, True, kernel_device)
    x_q, x_s = ik.quantize_act(x)
    split_cfg = ik._two_pass(32, 32, 64, 4, 2, split_k=4)
    y, _ = one_allocation(lambda: ik.gemm(x_q, x_s, wq, ws, b, torch.float16, config=split_cfg),
                                 "int8-dynamic gemm split 4")
    # int32 partial sums are exact: the split result equals the unsplit one bit for bit
    assert torch.equal(y, ik.gemm(x_q, x_s, wq, ws, b, torch.float16, config=ik._two_pass(32, 32, 64, 4, 2)))


# --------------------------------------------------------------------------- GPU: the cuBLAS path
@pytest.mark.gpu
def test_fp8_cublas_writes_into_the_output_block_gpu(one_allocation):
    if not fk._CUBLAS_ALLOWED or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("cuBLAS block-scaled fp8 needs sm_90 and torch._scaled_mm")
    for m, dtype, bias in ((1024, torch.bfloat16, True), (256, torch.float16, False), (96, torch.bfloat16, False)):
        x, _, weight_q, weight_scale, b = tf8.make_problem(m, 4096, 4096, dtype, bias, "cuda")
        y, _ = one_allocation(lambda: fk.linear(x, weight_q, weight_scale, b, config=fk._cublas()),
                                     f"cublas M={m}")
        # what the functional _scaled_mm returned on the same codes and scales (the previous path)
        x_q, x_s = fk.quantize_act(x)
        x_s_k = x_s.t().contiguous().t()  # the K-major layout cuBLAS asks for
        ref = torch._scaled_mm(x_q, weight_q.t(), x_s_k, weight_scale.t(), bias=b, out_dtype=dtype)
        assert torch.equal(y, ref), f"cublas M={m} {dtype}"
        # and a launch plan replays the out= call on new inputs
        layer = plan_mod.planned(lambda x_, w_, s_, b_: fk.linear(x_, w_, s_, b_, config=fk._cublas()))
        for _ in range(3):
            x2 = torch.randn_like(x)
            assert torch.equal(layer(x2, weight_q, weight_scale, b),
                               fk.linear(x2, weight_q, weight_scale, b, config=fk._cublas()))
        assert any(type(p) is plan_mod.Plan for p in layer.plans.values()), layer.plans


@pytest.mark.gpu
def test_fp8_gluon_split_k_partials_live_behind_the_output_gpu(one_allocation):
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon GEMM needs an sm_90 GPU")
    x, _, weight_q, weight_scale, b = tf8.make_problem(128, 4096, 4096, torch.bfloat16, True, "cuda")
    cfg = fk._gluon(128, 64, 8, 6, pdl=True, split_k=2)
    y, block = one_allocation(lambda: fk.linear(x, weight_q, weight_scale, b, config=cfg), "fp8 gluon split 2")
    assert block.numel() * block.element_size() >= y.numel() * 2 + 4 * 2 * 128 * 4096
    assert torch.equal(y, fk.linear(x, weight_q, weight_scale, b, config=cfg))
