#!/usr/bin/env bash
# Round 29, call 12 (H100): after the review's tidy-up (the split count taken from the carved partials in fp8-block's
# swap GEMM and int4's mma launcher), the one-allocation, plan, fp8 split-K and int4 mma tests on the GPU.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 300 python -m pytest -q -p no:cacheprovider tests/kernels/test_one_allocation.py tests/kernels/test_plan.py \
  tests/kernels/test_fp8_block.py::test_swap_split_k tests/kernels/test_int4_weight_only.py::test_mma \
  tests/kernels/test_int4_weight_only.py::test_every_kernel_variant_gpu > $OUT/gpu_tests_review.log 2>&1
tail -n 2 $OUT/gpu_tests_review.log
