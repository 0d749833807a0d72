#!/usr/bin/env bash
# Round 27, call 19 (H100): the tuning GPU tests on the final tables (every shipped entry of this GPU, the new
# M = 8 and M = 16 ones among them, against the reference).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 400 python -m pytest -q -p no:cacheprovider -m gpu -rfs tests/kernels/test_tuning.py > $OUT/gpu_tests_tuning_final.log 2>&1
echo "pytest rc $?" >> $OUT/gpu_tests_tuning_final.log
