#!/usr/bin/env bash
# Round 39, call 8 (H100): the whole GPU suite on the final kernels (MoE launch plans, fit_rows).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
R=$OUT/r; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $R/env8.txt 2>&1
timeout 570 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs > $R/gpu_suite.log 2>&1
echo "suite rc=$? $(tail -n 1 $R/gpu_suite.log)"
grep -E "^FAILED|^ERROR|^SKIPPED" $R/gpu_suite.log | head -20
date -u >> $R/env8.txt
