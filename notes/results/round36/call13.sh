#!/usr/bin/env bash
# Round 36, calls 11 to 13 (two H200s, lent late in the session): the device guard's two-GPU test, never run before
# (a layer quantized and called on cuda:1 while cuda:0 is current runs its kernels on cuda:1).
# Call 13: the same test with the input gradient on cuda:1 added.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env13.txt 2>&1
cat $OUT/r/env13.txt
timeout 240 python -m pytest -q -p no:cacheprovider -m gpu -n 4 -rs tests/layers/test_layers.py -k "second_gpu" > $OUT/r/gpu_tests_call13.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call13.log)"
grep -E "^FAILED|^ERROR|^SKIPPED|^E " $OUT/r/gpu_tests_call13.log | head -20
date -u >> $OUT/r/env13.txt
