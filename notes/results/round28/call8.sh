#!/usr/bin/env bash
# Round 28, call 8 (H100): the fp8 Gluon GEMM GPU tests that call 7's time limit cut off (20 had passed): the
# N = 1001 cases, the fallbacks and PDL / CUDA-graph replay, through linear() with codes and scales in the
# output's allocation.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 420 python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_f8_gemm_sm90.py -k "mnk6 or fall_back or pdl" > $OUT/gpu_tests_f8_gemm_rest.log 2>&1
tail -n 3 $OUT/gpu_tests_f8_gemm_rest.log
