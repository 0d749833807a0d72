#!/usr/bin/env bash
# Round 27, call 12 (H100): fp8-block's SUB 2 / x-at-use program at M = 16 on the decoder's other two shapes
# (1024×4096: k / v projections; 128256×4096: the LM head).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
f() { echo "{\"kernel\": \"decode\", \"MT\": $1, \"WK\": $2, \"WM\": 1, \"DK\": 128, \"SUB\": $3, \"BM\": $4, \"PDL\": true, \"fuse_act_quant\": false, \"XPF\": false}"; }
timeout 200 python scripts/probe_ab_configs.py fp8_block 16 1024x4096,128256x4096 5 \
  "$(f 1 4 2 16)" "$(f 1 4 2 8)" "$(f 1 2 2 16)" "$(f 1 4 1 8)" > $OUT/ab_fp8_sub2_m16_kv_head.log 2>&1
