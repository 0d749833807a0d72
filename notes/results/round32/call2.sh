#!/usr/bin/env bash
# Round 32, call 2 (H100): the decode kernel at M = 17-64 on small-N layers (k / v projections of Llama-3-8B,
# 1024x4096; 2048x4096; 512x2048 of a ~1B model), four alternating rounds against what the tables ran before
# (no entries there yet: "shipped").
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
PROBE_ROUNDS=4 timeout 270 python scripts/probe_eager_configs.py fp8d 17,32,48,64 1024x4096 2048x4096 512x2048 \
  > $OUT/eager_fp8d_small_n.log 2>&1
echo "fp8 probe rc=$?"
PROBE_ROUNDS=4 timeout 270 python scripts/probe_eager_configs.py int8d 17,32,48,64 1024x4096 2048x4096 512x2048 \
  > $OUT/eager_int8d_small_n.log 2>&1
echo "int8 probe rc=$?"
