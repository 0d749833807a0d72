"""The read-floor instrument: its kernel reads every word once (the XOR of each block, checked against
numpy, on the CPU through the Triton interpreter and on the GPU), and the floor is the least of its
configs' times under the timer it is given."""
import numpy as np
import pytest
import torch

from quantkit.bench import floor


def _xor_blocks(words: torch.Tensor, block: int) -> np.ndarray:
    a = words.cpu().numpy()
    pad = (-a.size) % block
    a = np.concatenate([a, np.zeros(pad, dtype=a.dtype)]).reshape(-1, block)
    return np.bitwise_xor.reduce(a, axis=1)


@pytest.mark.parametrize("words,block", [(3 * 4096, 4096), (2 * 8192 + 37, 8192), (5, 4096)])
def test_read_kernel_xors_every_block(words, block):
    src = torch.randint(-2**31, 2**31 - 1, (words,), dtype=torch.int32)
    out = floor.read_xor(src, block=block)
    assert out.numel() == -(-words // block)
    np.testing.assert_array_equal(out.numpy(), _xor_blocks(src, block))
    src[words // 2] ^= 1 << 7  # one flipped bit anywhere changes its block's word
    flipped = floor.read_xor(src, block=block)
    assert (flipped != out).sum().item() == 1


def test_read_kernel_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="contiguous int32"):
        floor.read_xor(torch.zeros(64, dtype=torch.float32))
    with pytest.raises(ValueError, match="contiguous int32"):
        floor.read_xor(torch.zeros(64, 2, dtype=torch.int32)[:, 0])
    with pytest.raises(ValueError, match="needs 3 int32 words"):
        floor.read_xor(torch.zeros(3 * 4096, dtype=torch.int32), torch.zeros(2, dtype=torch.int32))
    with pytest.raises(ValueError, match="positive"):
        floor.read_floor_ms(0, "cpu", lambda fn: 1.0)


def test_read_floor_is_the_fastest_config():
    """Every config is timed once through the given timer; the least time wins."""
    times = iter([3.0, 2.0, 5.0])
    calls = []

    def measure(fn):
        calls.append(fn())
        return next(times)

    configs = ((4096, 4), (8192, 4), (4096, 8))
    assert floor.read_floor_ms(4 * 4096 * 32 - 3, "cpu", measure, configs) == 2.0
    assert len(calls) == 3 and all(out.dtype == torch.int32 and out.numel() == 32 for out in calls)


@pytest.mark.gpu
def test_read_kernel_on_gpu():
    src = torch.randint(-2**31, 2**31 - 1, (10 * 16384 + 999,), dtype=torch.int32, device="cuda")
    for block, warps in floor.CONFIGS:
        out = floor.read_xor(src, block=block, num_warps=warps)
        np.testing.assert_array_equal(out.cpu().numpy(), _xor_blocks(src, block))
