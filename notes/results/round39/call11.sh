#!/usr/bin/env bash
# Round 39, call 11 (H100): int8-dynamic between the tuned buckets, the table's config against the two 128-row GEMMs
# the sweep picked at M = 530 and 1100 in call 10 (scripts/probe_wo_rows.py --families int8dyn).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $R/env11.txt 2>&1
timeout 300 python scripts/probe_wo_rows.py --families int8dyn --m 300,384,530,600,700,768,1100,1300,2100 > $R/rows_int8dyn.log 2>$R/rows_int8dyn.err; echo "rc=$?"; cat $R/rows_int8dyn.log; tail -3 $R/rows_int8dyn.err
date -u >> $R/env11.txt
