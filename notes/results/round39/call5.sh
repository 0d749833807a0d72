#!/usr/bin/env bash
# Round 39, call 5 (H100): the weight-only GEMMs at M between the tuned buckets (MoE experts get ~480-540 rows at
# Mixtral-8x7B's 2048 tokens; per layer at M = 530 / 497 the tables' configs read 0.54-0.62x of bf16 in call 4).
# Sweeps of every candidate at M = 497, 512, 530, 600, 768 on the two wide shapes (timings of every config kept).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $R/env5.txt 2>&1
for fam in int8_weight_only int4_weight_only; do
  timeout 260 python -m quantkit.kernels.tuning --family $fam --shapes 14336x4096,4096x14336 --m 497,512,530,600,768 --out $R/sweep_$fam.json > $R/sweep_$fam.log 2>&1
  echo "$fam rc=$?"; tail -n 25 $R/sweep_$fam.log
done
date -u >> $R/env5.txt
