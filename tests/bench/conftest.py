"""Benchmark tests run tiny models on the CPU, where many small ops on several threads mostly wait for
each other (and for whatever else shares the machine): one thread is faster and steadier."""
import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
