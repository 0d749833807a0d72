#!/usr/bin/env bash
# Round 36, call 2 (same machine): the whole GPU test suite on the code with the input gradient.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env2.txt 2>&1
timeout 540 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs --durations=5 > $OUT/r/gpu_tests_call2.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call2.log)"
grep -E "^FAILED|^ERROR|^SKIPPED" $OUT/r/gpu_tests_call2.log | head -20
date -u >> $OUT/r/env2.txt
