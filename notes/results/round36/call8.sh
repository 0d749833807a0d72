#!/usr/bin/env bash
# Round 36, call 8 (H100): the whole GPU test suite after the training audit (frozen-buffer check, vmap and jvp rules
# of the eager Function, register_vmap on the input-gradient ops), with the new test of those transforms on the GPU.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env8.txt 2>&1
timeout 480 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs --durations=5 > $OUT/r/gpu_tests_call8.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call8.log)"
grep -E "^FAILED|^ERROR|^SKIPPED" $OUT/r/gpu_tests_call8.log | head -20
grep -E "^E " $OUT/r/gpu_tests_call8.log | head -20
date -u >> $OUT/r/env8.txt
