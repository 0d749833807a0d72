#!/usr/bin/env bash
# Round 27, call 16 (H100): int8-dynamic's k / v projections (1024×4096, M = 16) with fp8-block's new program
# (SUB 2, 8 x rows; x at use and a trip ahead), alone and inside the b16 decode step.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
f() { echo "{\"kernel\": \"decode\", \"MT\": 1, \"WK\": 4, \"WM\": 1, \"DK\": 128, \"SUB\": 2, \"BM\": $1, \"PDL\": true$2}"; }
timeout 100 python scripts/probe_ab_configs.py int8_dynamic 16 1024x4096 7 "$(f 8 ', "XPF": false')" "$(f 8 '')" \
  "$(f 16 ', "XPF": false')" > $OUT/ab_int8dyn_sub2_m16_kv.log 2>&1
timeout 240 python scripts/probe_decode_step_configs.py int8dyn_b16_kv_sub2 --rounds 5 \
  --json $OUT/step_int8dyn_b16_kv_sub2.json > $OUT/step_int8dyn_b16_kv_sub2.log 2>&1
