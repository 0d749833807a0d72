#!/usr/bin/env bash
# Round 31, call 8 (H100): after the review's refactor (one helper launches the split-K sum for both fp8 GEMMs):
# the fp8-block GPU tests, the split-K ones among them.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 400 python -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/kernels/test_f8_gemm_sm90.py \
  tests/kernels/test_one_allocation.py tests/kernels/test_fp8_block.py tests/kernels/test_plan.py > $OUT/gpu_tests_review.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/gpu_tests_review.log)"
