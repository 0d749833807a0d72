#!/usr/bin/env bash
# Round 38, call 6 (H100): the MoE GPU tests after the review's refactor (align's one-hot rows and runs as helpers
# shared by its single-program and chunked kernels; behaviour unchanged).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env6.txt 2>&1
timeout 300 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs tests/kernels/test_moe.py tests/layers/test_experts.py tests/layers/test_layers.py > $OUT/r/gpu_tests_moe.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_moe.log)"
grep -E "^FAILED|^ERROR|^E  .*Error|^E   *assert|^E   *Assert" $OUT/r/gpu_tests_moe.log | head -20
date -u >> $OUT/r/env6.txt
