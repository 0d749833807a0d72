#!/usr/bin/env bash
# Round 34, call 11 (H100): batch 5-8 decoding (M = 8) of the weight-only recipes has no table entry and runs the
# M = 4 one (a DIAG program, plain at M = 8); call 6 found other decode programs 5-16 % ahead at groups 32 / 64.
# Sweep both families at M = 8 on the Llama shapes and the k / v projection (group 128; the finalists re-timed).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/r/env11.txt
date -u >> $OUT/r/env11.txt
S=4096x4096,14336x4096,4096x14336,1024x4096
for F in int4_weight_only int8_weight_only; do
  timeout 280 python -m quantkit.kernels.tuning --family $F --shapes $S --m 8 --out $OUT/r/sweep_m8_$F.json \
    > $OUT/r/sweep_m8_$F.log 2>&1
  echo "$F rc=$?"; grep "M=8" $OUT/r/sweep_m8_$F.log | cut -c1-260
done
date -u >> $OUT/r/env11.txt
tar czf $OUT/call11.tgz -C $OUT r
