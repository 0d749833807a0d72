#!/usr/bin/env bash
# Round 29, call 6 (H100): end to end on the final tree (the split-K paths' one allocation, fp8-block's cuBLAS
# path into the output, the 4096² M = 4096 entry), then the weight-only families' and fp8-block's GPU tests.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 230 python -m quantkit bench e2e --json $OUT/bench_e2e.json > $OUT/bench_e2e.log 2>&1
grep -B2 -A12 "tok/s\|prefill" $OUT/bench_e2e.md | head -40
timeout 330 python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_int8_weight_only.py \
  tests/kernels/test_int4_weight_only.py tests/kernels/test_fp8_block.py -k "not every_candidate" \
  > $OUT/gpu_tests_families.log 2>&1
tail -n 4 $OUT/gpu_tests_families.log
