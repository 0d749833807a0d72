#!/usr/bin/env bash
# Round 27, call 6 (H100): int8 weight-only's decode kernel on 128-deep chunks with eight warps at
# 4096×14336 M = 16, alone (seven rounds, with neighbours) and inside the b16 decode step; the weight-only
# decode kernels with 16 warps splitting K (no grid went past 8).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
d() { echo "{\"kernel\": \"decode\", \"MT\": $1, \"WK\": $2, \"WM\": $3, \"DK\": $4, \"SUB\": $5, \"XPF\": $6}"; }
timeout 150 python scripts/probe_ab_configs.py int8_weight_only 16 4096x14336,4096x4096 7 \
  "$(d 1 8 1 128 1 false)" "$(d 1 8 1 128 1 true)" "$(d 1 16 1 128 1 false)" "$(d 1 16 1 64 1 false)" \
  "$(d 1 8 1 128 2 false)" "$(d 2 8 1 128 1 false)" > $OUT/ab_int8wo_wk8_m16.log 2>&1
timeout 150 python scripts/probe_ab_configs.py int4_weight_only 16 4096x14336,14336x4096,4096x4096 5 \
  "$(d 1 16 1 128 1 false)" "$(d 1 16 1 128 1 true)" "$(d 2 8 1 128 1 false)" "$(d 1 8 1 128 1 false)" \
  "$(d 2 16 1 128 1 false)" > $OUT/ab_int4_wk16_m16.log 2>&1
timeout 240 python scripts/probe_decode_step_configs.py int8wo_b16_down_dk128 --rounds 5 \
  --json $OUT/step_int8wo_b16_down_dk128.json > $OUT/step_int8wo_b16_down_dk128.log 2>&1
