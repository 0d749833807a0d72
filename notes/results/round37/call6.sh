#!/usr/bin/env bash
# Round 37, call 6 (H100): the whole GPU test suite on the round's code (quantize_ now splits fused MoE experts; the
# grouped MoE kernels; the checkpoint code's names).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env6.txt 2>&1
timeout 560 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs --durations=5 > $OUT/r/gpu_tests_call6.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call6.log)"
grep -E "^FAILED|^ERROR|^SKIPPED" $OUT/r/gpu_tests_call6.log | head -20
date -u >> $OUT/r/env6.txt
