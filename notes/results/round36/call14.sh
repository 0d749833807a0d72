#!/usr/bin/env bash
# Round 36, call 14 (H100): the layers' GPU tests with the layers following torch.autocast (x cast to the autocast
# dtype, the call run with autocast off), and the new autocast GPU test.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env14.txt 2>&1
timeout 300 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs tests/layers > $OUT/r/gpu_tests_call14.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call14.log)"
grep -E "^FAILED|^ERROR|^SKIPPED|^E " $OUT/r/gpu_tests_call14.log | head -20
date -u >> $OUT/r/env14.txt
