#!/usr/bin/env bash
# Round 27, call 18 (H100): M = 8 (batch 5-8 decode). No table has an M = 8 entry; the nearest, M = 4's DIAG
# program, runs there as a plain one. Against it: each shape's M = 16 entry and the SUB 2 / x-at-use programs.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
f() { echo "{\"kernel\": \"decode\", \"MT\": $1, \"WK\": $2, \"WM\": $3, \"DK\": 128, \"SUB\": $4, \"BM\": $5, \"PDL\": true$6}"; }
F8=', "fuse_act_quant": false'
timeout 150 python scripts/probe_ab_configs.py fp8_block 8 4096x4096,4096x14336,14336x4096,1024x4096 5 \
  "$(f 1 4 1 2 16 ", \"XPF\": false$F8")" "$(f 1 4 1 2 8 ", \"XPF\": false$F8")" "$(f 1 4 1 1 16 "$F8")" \
  "$(f 2 2 2 1 16 ", \"XPF\": false$F8")" > $OUT/ab_fp8_m8.log 2>&1
timeout 150 python scripts/probe_ab_configs.py int8_dynamic 8 4096x4096,4096x14336,14336x4096,1024x4096 5 \
  "$(f 1 4 1 2 16 ', "XPF": false')" "$(f 1 4 1 2 8 ', "XPF": false')" "$(f 1 4 1 1 16 '')" "$(f 2 2 1 1 16 '')" \
  > $OUT/ab_int8dyn_m8.log 2>&1
