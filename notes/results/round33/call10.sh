#!/usr/bin/env bash
# Round 33, call 10 (H100): fp8-block's wide-N rule at M = 17-64 with one K block a step where K < 4096 (after call 9):
# the family's GPU tests, then call 9's probe on 18944 x 3584 (None: the new default).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
timeout 200 python -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/kernels/test_fp8_block.py \
  tests/kernels/test_f8_gemm_sm90.py > $OUT/r/gpu_tests_fp8_final.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_fp8_final.log)"
PROBE_ROUNDS=3 timeout 100 python scripts/probe_eager_configs.py fp8w 32,64 18944x3584 > $OUT/r/eager_fp8w_final.log 2>&1
echo "fp8w rc=$?"
tar czf $OUT/call10.tgz -C $OUT r
