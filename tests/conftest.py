"""Test set-up shared by every test.

Without a CUDA GPU the Triton kernels run on CPU tensors through Triton's interpreter. The
interpreter is chosen when a kernel is *decorated*, so TRITON_INTERPRET must be set before any
``quantkit.kernels`` module is imported — here, before the tests are collected.
"""
import os
import zlib

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:
    import triton  # noqa: F401

    HAS_TRITON = True
except Exception:  # noqa: BLE001
    HAS_TRITON = False


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run `pytest -m gpu` on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)


@pytest.fixture
def kernel_device():
    """Where kernel tests put their tensors: the GPU if there is one, else the CPU (interpreter)."""
    if not HAS_TRITON:
        pytest.skip("triton is not installed")
    return "cuda" if HAS_CUDA else "cpu"


@pytest.fixture(autouse=True)
def _fresh_seed(request):
    # A different but reproducible seed per test: fresh inputs everywhere, failures replayable.
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def release_gpu_memory():
    """Give the allocator's cached blocks back after the test: the GPU suite runs 12 processes on one GPU, and in
    round 37's call 11 a test ran out of memory beside processes holding up to 18 GB. For tests of large blocks
    (the MoE tests use it for every test of their files)."""
    yield
    if HAS_CUDA:
        torch.cuda.empty_cache()
