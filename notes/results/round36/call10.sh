#!/usr/bin/env bash
# Round 36, call 10 (H100): the layers' GPU tests after call 9's failure (forward AD with dual tensors on an output that is a view
# into the kernel's block, output and split-K workspace, failed an internal assert; the output is now cloned there).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env10.txt 2>&1
timeout 300 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs tests/layers > $OUT/r/gpu_tests_call10.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call10.log)"
grep -E "^FAILED|^ERROR|^SKIPPED|^E " $OUT/r/gpu_tests_call10.log | head -20
date -u >> $OUT/r/env10.txt
