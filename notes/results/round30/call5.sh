#!/usr/bin/env bash
# Round 30, call 5 (H200): the H200 borrows the H100's int8 weight-only 4096² M = 16 entry, now the two-warp `stream`
# program; against the four-warp program it replaced, nine alternating rounds.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee $OUT/gpu5.txt
timeout 200 python scripts/probe_ab_configs.py int8_weight_only 16 4096x4096 9 \
  '{"BLOCK_K": 512, "BLOCK_M": 16, "BLOCK_N": 16, "kernel": "stream", "num_stages": 4, "num_warps": 4}' \
  > $OUT/ab_int8wo_m16_h200.log 2>&1
cat $OUT/ab_int8wo_m16_h200.log
