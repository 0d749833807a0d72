#!/usr/bin/env bash
# Round 38, call 9 (H100): the whole GPU suite on the final code (after call 5: the align refactor and SWAP,
# each run with its MoE tests in calls 6 and 8).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env9.txt 2>&1
timeout 480 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs --durations=8 > $OUT/r/gpu_tests_call9.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call9.log)"
grep -E "^FAILED|^ERROR|^SKIPPED" $OUT/r/gpu_tests_call9.log | head -20
grep -A10 "slowest" $OUT/r/gpu_tests_call9.log
date -u >> $OUT/r/env9.txt
