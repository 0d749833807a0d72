#!/usr/bin/env bash
# Round 32, call 8 (H200): fp8-block's sweep at M = 32 and 64 on the Llama-3-8B shapes (no table has M = 32 entries
# for them; both GPUs borrow the M = 64 / 128 entries), candidates of round 32 (the decode programs among them).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 500 python -m quantkit.kernels.tuning --family fp8_block --m 32,64 --out $OUT/h200_sweep_fp8_m32_64.json \
  > $OUT/h200_sweep_fp8_m32_64.log 2>&1
echo "sweep rc=$?"; tail -n 12 $OUT/h200_sweep_fp8_m32_64.log
