#!/usr/bin/env bash
# Round 32, call 9 (H100): fp8-block's sweep at M = 32 and 64 on the Llama-3-8B shapes (the H200's, call 8, put the
# swap kernel 1.0-1.6x ahead of the borrowed Gluon entries there).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 500 python -m quantkit.kernels.tuning --family fp8_block --m 32,64 --out $OUT/sweep_fp8_m32_64.json \
  > $OUT/sweep_fp8_m32_64.log 2>&1
echo "sweep rc=$?"; grep best $OUT/sweep_fp8_m32_64.log
