#!/usr/bin/env bash
# Round 39, call 9 (H100): scripts/bench_moe.py on the final kernels; the 8-bit activation recipes at M between
# the tuned buckets (reported, not changed).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $R/env9.txt 2>&1
timeout 300 python scripts/bench_moe.py --rounds 3 --json $R/bench_moe.json > $R/bench_moe.log 2>&1
echo "bench rc=$?"; grep -v Warning $R/bench_moe.log | head -100
timeout 200 python -m quantkit bench layers --recipes fp8-block int8-dynamic --m 530,1100 --no-peers --no-floor --no-plot --no-gpu-time --json $R/layers_8bit.json > $R/layers_8bit.log 2>&1
echo "layers rc=$?"; sed -n '/Speedup over/,/^$/p' $R/layers_8bit.md 2>/dev/null | head -14; grep -A12 "Speedup over" $R/layers_8bit.md | head -14
date -u >> $R/env9.txt
