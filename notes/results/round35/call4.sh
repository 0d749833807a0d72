#!/usr/bin/env bash
# Round 35, call 4 (H100, a fresh machine): the whole GPU test suite again, after the int4 search's GPU test
# compares every 8th row with the CPU search instead of all 4096 (call 1: 283 / 207 / 142 s for its three cases,
# the suite 7 min 31 s with a cold compile cache).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env4.txt 2>&1
timeout 560 python -m pytest -q -p no:cacheprovider -m gpu -n 12 --durations=10 > $OUT/r/gpu_tests_call4.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call4.log)"
grep -E "^FAILED|^ERROR" $OUT/r/gpu_tests_call4.log | head -20
grep -A11 "slowest" $OUT/r/gpu_tests_call4.log | head -12
date -u >> $OUT/r/env4.txt
tar czf $OUT/call4.tgz -C $OUT r
