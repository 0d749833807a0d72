#!/usr/bin/env bash
# Round 32, call 4 (H100): the weight-only families at N <= 2048, M = 17-64 (k / v projections in batched decoding):
# what the tables / defaults run against bf16 and the M = 16 entries' Triton programs, three alternating rounds.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
PROBE_ROUNDS=3 timeout 200 python scripts/probe_eager_configs.py wo8k 17,32,64 1024x4096 2048x4096 512x2048 \
  > $OUT/eager_wo8k.log 2>&1
echo "int8wo probe rc=$?"
PROBE_ROUNDS=3 timeout 200 python scripts/probe_eager_configs.py int4k 17,32,64 1024x4096 2048x4096 512x2048 \
  > $OUT/eager_int4k.log 2>&1
echo "int4 probe rc=$?"
