#!/usr/bin/env bash
# Round 27, call 13 (H100): fp8-block's k / v projections (1024×4096) at M = 16 with SUB 2 / 8 x rows / x at use,
# inside the b16 decode step, and again alone (seven rounds).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 100 python scripts/probe_ab_configs.py fp8_block 16 1024x4096 7 \
  '{"kernel": "decode", "MT": 1, "WK": 4, "WM": 1, "DK": 128, "SUB": 2, "BM": 8, "PDL": true, "fuse_act_quant": false, "XPF": false}' \
  > $OUT/ab_fp8_sub2_m16_kv.log 2>&1
timeout 240 python scripts/probe_decode_step_configs.py fp8_b16_kv_sub2 --rounds 5 --json $OUT/step_fp8_b16_kv_sub2.json \
  > $OUT/step_fp8_b16_kv_sub2.log 2>&1
