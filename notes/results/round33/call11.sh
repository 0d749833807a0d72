#!/usr/bin/env bash
# Round 33, call 11 (H100): the tuning module's GPU tests after the sweep stopped timing a default twice (it reuses
# the candidate's time where the default is one).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
timeout 200 python -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_tuning.py tests/test_tune_cli.py \
  > $OUT/r/gpu_tests_tuning.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_tuning.log)"
grep -E "FAILED|Error" $OUT/r/gpu_tests_tuning.log | head
tar czf $OUT/call11.tgz -C $OUT r
