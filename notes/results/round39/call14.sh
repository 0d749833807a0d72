#!/usr/bin/env bash
# Round 39, call 14 (H100): the whole GPU suite on the final code (int8-dynamic's fit_rows bound at 1400), with a
# longer limit than call 13's, whose summary line the limit cut.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
R=$OUT/r; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $R/env14.txt 2>&1
timeout 540 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs > $R/gpu_suite.log 2>&1
echo "suite rc=$? $(tail -n 1 $R/gpu_suite.log)"
grep -E "^FAILED|^ERROR|^SKIPPED" $R/gpu_suite.log | head -20
date -u >> $R/env14.txt
