#!/usr/bin/env bash
# Round 39, call 6 (H100): weight-only GEMMs at M between the tuned buckets, the table's 256-row tiles against
# 128-row variants (scripts/probe_wo_rows.py), GPU time from CUDA graphs.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $R/env6.txt 2>&1
timeout 500 python scripts/probe_wo_rows.py > $R/rows.log 2>$R/rows.err; echo "rc=$?"; cat $R/rows.log; tail -5 $R/rows.err
date -u >> $R/env6.txt
