#!/usr/bin/env bash
# Round 27, call 17 (H100): the 8-bit decode GPU tests with int8-dynamic's new k / v program among the candidates
# (int8 outputs bit-identical to the fused kernels'), and int8-dynamic's GPU tests.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 300 python -m pytest -q -p no:cacheprovider -m gpu -rfs tests/kernels/test_aq_decode_sm90.py > $OUT/gpu_tests_aq_decode_int8kv.log 2>&1
echo "pytest rc $?" >> $OUT/gpu_tests_aq_decode_int8kv.log
timeout 250 python -m pytest -q -p no:cacheprovider -m gpu -rfs tests/kernels/test_int8_dynamic.py > $OUT/gpu_tests_int8_dynamic.log 2>&1
echo "pytest rc $?" >> $OUT/gpu_tests_int8_dynamic.log
