"""Device helpers the kernel families share."""
import triton
import triton.language as tl

from quantkit.reference.common import ceil_div


def split_plan(K: int, block_k: int, split: int) -> tuple[int, int]:
    """(K steps a split, number of splits) for a requested split-K ``split``: equal ranges of whole
    ``block_k`` steps (the last may be shorter), none empty, so the count can be below the request."""
    num_k = ceil_div(K, block_k)
    k_iters = ceil_div(num_k, max(1, min(split, num_k)))
    return k_iters, ceil_div(num_k, k_iters)


@triton.jit
def grouped_pid(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of output tile number ``tile`` in grouped launch order: GROUP_M consecutive
    row tiles sweep the column tiles together, so the programs in flight share their row and column
    tiles in L2 (each is fetched from DRAM about once per group instead of once per program). Pass
    the axes swapped to group along N instead."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    first_m = (tile // in_group) * GROUP_M
    group_size = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % in_group) % group_size
    pid_n = (tile % in_group) // group_size
    return pid_m, pid_n
