#!/usr/bin/env bash
# Round 26, call 3 (H100): the two GEMM test files call 2's 560 s limit did not reach.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 570 python -m pytest -q -p no:cacheprovider -m gpu -rfs --durations=10 tests/kernels/test_i8_gemm_sm90.py \
  tests/kernels/test_wo_gemm_sm90.py > $OUT/gpu_tests_gemm.log 2>&1
echo "pytest rc $?" >> $OUT/gpu_tests_gemm.log
