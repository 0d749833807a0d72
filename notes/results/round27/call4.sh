#!/usr/bin/env bash
# Round 27, call 4 (H100): fp8-block's SUB 2 / x-at-use decode config judged inside the b16 decode step,
# and confirmed per layer at M = 16 and M = 12 (seven alternating rounds).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
C='{"kernel": "decode", "MT": 1, "WK": 4, "WM": 1, "DK": 128, "SUB": 2, "BM": 16, "PDL": true, "fuse_act_quant": false, "XPF": false}'
timeout 150 python scripts/probe_ab_configs.py fp8_block 16 4096x4096,4096x14336 7 "$C" > $OUT/ab_fp8_sub2_m16.log 2>&1
timeout 100 python scripts/probe_ab_configs.py fp8_block 12 4096x4096,4096x14336 5 "$C" > $OUT/ab_fp8_sub2_m12.log 2>&1
timeout 300 python scripts/probe_decode_step_configs.py fp8_b16_sub2 --rounds 5 --json $OUT/step_fp8_b16_sub2.json > $OUT/step_fp8_b16_sub2.log 2>&1
