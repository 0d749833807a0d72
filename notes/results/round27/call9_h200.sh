#!/usr/bin/env bash
# Round 27, call 9 (H200, which borrows the H100's fp8-block M = 16 entries): the new SUB 2 / x-at-use entries
# against round 26's, per layer and inside the b16 decode step.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/device_h200.txt 2>&1
timeout 120 python scripts/probe_ab_configs.py fp8_block 16 4096x4096,4096x14336 5 \
  '{"kernel": "decode", "MT": 1, "WK": 4, "WM": 1, "DK": 128, "SUB": 1, "BM": 16, "PDL": true, "fuse_act_quant": false}' \
  > $OUT/h200_ab_fp8_sub2_m16.log 2>&1
timeout 300 python scripts/probe_decode_step_configs.py fp8_b16_sub2 --rounds 5 --json $OUT/h200_step_fp8_b16_sub2.json \
  > $OUT/h200_step_fp8_b16_sub2.log 2>&1
