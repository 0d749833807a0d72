#!/usr/bin/env bash
# Round 39, call 13 (H100): the whole GPU suite on the final code (int8-dynamic's fit_rows kept to M <= 512 and
# 1025-1331), then int8-dynamic at the rule's edges.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
R=$OUT/r; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $R/env13.txt 2>&1
timeout 450 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs > $R/gpu_suite.log 2>&1
echo "suite rc=$? $(tail -n 1 $R/gpu_suite.log)"
grep -E "^FAILED|^ERROR|^SKIPPED" $R/gpu_suite.log | head -20
timeout 100 python scripts/probe_wo_rows.py --families int8dyn --m 1100,1331,1332,2100,2600 --shapes 4096x14336,4096x4096 > $R/rows_int8dyn.log 2>&1; echo "rc=$?"; cat $R/rows_int8dyn.log | grep -v Warn
date -u >> $R/env13.txt
