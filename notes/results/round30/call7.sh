#!/usr/bin/env bash
# Round 30, call 7 (H100): the GPU test suite on the final tree, first half (the 8-bit families and the Gluon GEMMs).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
for f in test_fp8_block test_f8_gemm_sm90 test_int8_dynamic test_i8_gemm_sm90 test_aq_decode_sm90 test_wo_gemm_sm90; do
  timeout 400 python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/$f.py > $OUT/gpu_$f.log 2>&1
  echo "$f rc=$? $(tail -n 1 $OUT/gpu_$f.log)"
done
