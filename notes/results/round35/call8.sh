#!/usr/bin/env bash
# Round 35, call 8 (H100): the GPU tests of quantkit tune and the tuning module after tune's up-front output checks.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
date -u > $OUT/r/env8.txt
timeout 240 python -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/test_tune_cli.py tests/kernels/test_tuning.py \
  > $OUT/r/gpu_tests_call8.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call8.log)"
grep -E "^FAILED|^ERROR" $OUT/r/gpu_tests_call8.log | head
date -u >> $OUT/r/env8.txt
tar czf $OUT/call8.tgz -C $OUT r
