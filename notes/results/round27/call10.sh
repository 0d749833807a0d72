#!/usr/bin/env bash
# Round 27, call 10 (H100): the GPU tests of the layers, the API, the benchmarks, launch plans and tuning on
# this round's tables (the fp8-block M = 16 entries run through the layers).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 540 python -m pytest -q -p no:cacheprovider -m gpu -rfs --durations=10 tests/layers tests/test_api.py \
  tests/bench tests/kernels/test_plan.py tests/kernels/test_tuning.py > $OUT/gpu_tests_layers_api.log 2>&1
echo "pytest rc $?" >> $OUT/gpu_tests_layers_api.log
