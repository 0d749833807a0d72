#!/usr/bin/env bash
# Round 36, calls 11 and 12 (two H200s, lent late in the session): the device guard's two-GPU test, never run before
# (a layer quantized and called on cuda:1 while cuda:0 is current runs its kernels on cuda:1).
# Call 12: call 11 again after the test's fix (int4 on cuda:1 compared with the same quantizer on cuda:0, not the CPU).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env12.txt 2>&1
cat $OUT/r/env12.txt
timeout 240 python -m pytest -q -p no:cacheprovider -m gpu -n 4 -rs tests/layers/test_layers.py -k "second_gpu" > $OUT/r/gpu_tests_call12.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call12.log)"
grep -E "^FAILED|^ERROR|^SKIPPED|^E " $OUT/r/gpu_tests_call12.log | head -20
date -u >> $OUT/r/env12.txt
