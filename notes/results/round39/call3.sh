#!/usr/bin/env bash
# Round 39, call 3 (H100): scripts/bench_moe.py on 5f8cfd2 (eager cells with the MoE launch plans).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $R/env3.txt 2>&1
timeout 400 python scripts/bench_moe.py --rounds 3 --json $R/bench_moe.json > $R/bench_moe.log 2>&1
echo "bench rc=$?"; grep -v Warning $R/bench_moe.log | head -140
date -u >> $R/env3.txt
