#!/usr/bin/env bash
# Round 28, call 10 (H100): int8-dynamic's H100 entry at 4096² M = 128 now the Gluon GEMM, 128 x 64 tiles in two K
# halves, 6 stages, PDL (call 9: 19.7-19.9 µs of GPU time against the pointer GEMM's 21.4-21.7, host 34-37 µs a
# call). (a) GPU tests: every shipped entry against the reference (test_tuning), the Gluon int8 GEMM's split-K
# bit-identity, the family's GPU tests; (b) the cells at 4096² M = 64 / 128 / 256, five rounds.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 330 python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_tuning.py tests/kernels/test_i8_gemm_sm90.py tests/kernels/test_int8_dynamic.py > $OUT/gpu_tests_int8dyn.log 2>&1
timeout 150 python -m quantkit bench layers --no-plot --no-peers --no-floor --recipes int8-dynamic --shapes 4096x4096 --m 64,128,256 --rounds 5 --json $OUT/int8dyn_mid.json > $OUT/int8dyn_mid.log 2>&1
tail -n 3 $OUT/gpu_tests_int8dyn.log; grep -E "^  (bf16|int8)" $OUT/int8dyn_mid.log | cut -c1-170
