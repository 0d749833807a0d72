"""Small numeric helpers shared by the reference formats."""
import torch

# Lower bound on an amax before it becomes a scale: an all-zero group or block then gets a tiny
# positive scale (its codes are all 0) instead of a division by zero. Kernels use the same constant.
AMAX_EPS = 1e-12


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def pad_to_multiple(t: torch.Tensor, dim: int, multiple: int) -> torch.Tensor:
    """Zero-pad ``t`` along ``dim`` up to a multiple of ``multiple`` (no copy when already aligned)."""
    size = t.shape[dim]
    extra = ceil_div(size, multiple) * multiple - size
    if extra == 0:
        return t
    pad = [0, 0] * (t.dim() - 1 - (dim % t.dim())) + [0, extra]
    return torch.nn.functional.pad(t, pad)


def div_exact(t: torch.Tensor, divisor: float) -> torch.Tensor:
    """``t / divisor`` rounded as IEEE division on every device.

    PyTorch's CUDA kernels turn division by a Python scalar into a multiplication by its reciprocal,
    which differs from true division in the last bit for some inputs (so scales computed on a GPU
    would not match the CPU's, nor the kernels' ``div_rn``). Dividing by a tensor on the same device
    keeps IEEE division everywhere.
    """
    return t / torch.tensor(divisor, dtype=t.dtype, device=t.device)
