#!/usr/bin/env bash
# Round 39, call 10 (H100): the 8-bit activation recipes at M between the tuned buckets (call 9: fp8-block 0.75x and
# int8-dynamic 0.88x of bf16 at 4096² M = 530): every sweep candidate at M = 530, 600, 1100.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $R/env10.txt 2>&1
for fam in int8_dynamic fp8_block; do
  timeout 250 python -m quantkit.kernels.tuning --family $fam --m 530,600,1100 --out $R/sweep_$fam.json > $R/sweep_$fam.log 2>&1
  echo "$fam rc=$?"; grep -E "^$fam M=" $R/sweep_$fam.log
done
date -u >> $R/env10.txt
