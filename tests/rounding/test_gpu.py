"""The int4 roundings on the GPU at Llama shapes: same results as on the CPU, error and time."""
import time

import pytest
import torch

from quantkit.reference.int4 import dequantize_weight_int4, quantize_weight_int4
from quantkit.rounding.gptq import quantize_weight_int4_gptq
from quantkit.rounding.search import quantize_weight_int4_search


def _timed(fn, *args, **kwargs):
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    torch.cuda.synchronize()
    return out, time.perf_counter() - start


@pytest.mark.gpu
def test_search_on_gpu_matches_cpu_and_is_fast():
    w = (torch.randn(4096, 4096) * 0.02).to(torch.bfloat16)
    x = torch.randn(2048, 4096, dtype=torch.float64, device="cuda")
    quantize_weight_int4_search(w[:64].cuda(), 128)  # warm-up
    (packed, scale, zero), seconds = _timed(quantize_weight_int4_search, w.cuda(), 128)
    big, seconds_big = _timed(quantize_weight_int4_search, (torch.randn(4096, 14336, device="cuda") * 0.02)
                              .to(torch.bfloat16), 128)
    print(f"search on {torch.cuda.get_device_name()}: 4096x4096 {seconds:.3f} s, 4096x14336 {seconds_big:.3f} s")
    assert seconds_big < 10.0  # a vectorized search takes well under a second here
    cpu_scale, cpu_zero = quantize_weight_int4_search(w[:512], 128)[1:]
    same = (scale[:512].cpu() == cpu_scale) & (zero[:512].cpu() == cpu_zero)
    assert same.float().mean().item() > 0.99  # float sums may order differently on the GPU; ties are rare
    wd = w.cuda().double()
    y = x @ wd.t()

    def err(p):
        return ((x @ dequantize_weight_int4(*p, 128, torch.float64).t() - y).norm() / y.norm()).item()

    assert err((packed, scale, zero)) <= 0.95 * err(quantize_weight_int4(w.cuda(), 128, False))


@pytest.mark.gpu
def test_gptq_on_gpu_is_fast_and_helps():
    n, k = 4096, 4096
    w = (torch.randn(n, k, device="cuda") * 0.02).to(torch.bfloat16)
    basis = torch.randn(64, k, device="cuda")

    def inputs(m):
        return torch.randn(m, 64, device="cuda") @ basis + 0.3 * torch.randn(m, k, device="cuda")

    calib = inputs(8192)
    h = calib.t() @ calib / calib.shape[0]
    quantize_weight_int4_gptq(w[:64, :256], 128, False, None, hessian=h[:256, :256])  # warm-up
    packed_scale_zero, seconds = _timed(quantize_weight_int4_gptq, w, 128, False, None, hessian=h)
    print(f"gptq on {torch.cuda.get_device_name()}: {n}x{k} {seconds:.2f} s")
    assert seconds < 30.0
    x = inputs(2048).double()
    y = x @ w.double().t()

    def err(p):
        return ((x @ dequantize_weight_int4(*p, 128, torch.float64).t() - y).norm() / y.norm()).item()

    assert err(packed_scale_zero) < 0.5 * err(quantize_weight_int4_search(w, 128))
