#!/usr/bin/env bash
# Round 32, call 6 (H200, which borrows the H100's tables): every round-32 entry and default at N <= 2048,
# M = 17-64, eager through the planned layer, three alternating rounds, against what ran there before.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/env_h200.txt
for fam in fp8k int8k wo8k int4k; do
  PROBE_ROUNDS=3 timeout 140 python scripts/probe_eager_configs.py $fam 17,32,64 1024x4096 2048x4096 512x2048 \
    > $OUT/h200_eager_$fam.log 2>&1
  echo "$fam rc=$?"
done
