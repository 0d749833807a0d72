#!/usr/bin/env bash
# Round 39, call 2 (H100): the whole GPU suite on 5f8cfd2 (MoE launch plans; also the first GPU run of d53f46f's
# input checks and 8561952's contiguous routing index).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
R=$OUT/r; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; git log --oneline -1 2>/dev/null; } > $R/env2.txt 2>&1
timeout 560 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs > $R/gpu_suite.log 2>&1
echo "suite rc=$? $(tail -n 1 $R/gpu_suite.log)"
grep -E "^FAILED|^ERROR|^SKIPPED" $R/gpu_suite.log | head -20
date -u >> $R/env2.txt
