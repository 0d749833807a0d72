#!/usr/bin/env bash
# Round 30, call 9 (H100): the rest of call 7's GPU tests (call 7 ran out of time in test_i8_gemm_sm90 after 7 passed).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
for f in test_aq_decode_sm90 test_wo_gemm_sm90 test_i8_gemm_sm90; do
  timeout 330 python -m pytest -q -p no:cacheprovider -m gpu --durations=5 tests/kernels/$f.py > $OUT/gpu_$f.log 2>&1
  echo "$f rc=$? $(grep -E 'passed|failed' $OUT/gpu_$f.log | tail -n 1)"
done
