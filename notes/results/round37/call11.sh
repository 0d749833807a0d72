#!/usr/bin/env bash
# Round 37, call 11 (H100): the whole GPU test suite on the final code (after call 6: the grouped MoE kernels' launch
# configs, the narrower fused-experts test, int32 routing indices, the stacked-experts save test).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env11.txt 2>&1
timeout 560 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs --durations=5 > $OUT/r/gpu_tests_call11.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call11.log)"
grep -E "^FAILED|^ERROR|^SKIPPED" $OUT/r/gpu_tests_call11.log | head -20
date -u >> $OUT/r/env11.txt
