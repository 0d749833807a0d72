#!/usr/bin/env bash
# Round 27, call 3 (H100): call 2's winner (SUB 2 with x at use) and its neighbours, all with XPF false.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
S=4096x4096,14336x4096,4096x14336
cfgs() {  # $1: extra keys
  for c in '"MT": 1, "WK": 4, "WM": 1, "DK": 128, "SUB": 2' '"MT": 1, "WK": 8, "WM": 1, "DK": 128, "SUB": 2' \
           '"MT": 1, "WK": 2, "WM": 1, "DK": 128, "SUB": 4' '"MT": 1, "WK": 4, "WM": 1, "DK": 64, "SUB": 2' \
           '"MT": 1, "WK": 4, "WM": 1, "DK": 64, "SUB": 4' '"MT": 1, "WK": 8, "WM": 1, "DK": 64, "SUB": 2' \
           '"MT": 1, "WK": 4, "WM": 2, "DK": 128, "SUB": 2' '"MT": 2, "WK": 2, "WM": 2, "DK": 128, "SUB": 2' \
           '"MT": 2, "WK": 4, "WM": 1, "DK": 128, "SUB": 2' '"MT": 1, "WK": 16, "WM": 1, "DK": 64, "SUB": 1'; do
    echo "{\"kernel\": \"decode\", \"BM\": 16, \"PDL\": true, \"XPF\": false, $c$1}"
  done
}
mapfile -t I8 < <(cfgs "")
mapfile -t F8 < <(cfgs ', "fuse_act_quant": false')
timeout 280 python scripts/probe_ab_configs.py fp8_block 16 $S 5 "${F8[@]}" > $OUT/sub2_fp8_block.log 2>&1
timeout 280 python scripts/probe_ab_configs.py int8_dynamic 16 $S 5 "${I8[@]}" > $OUT/sub2_int8_dynamic.log 2>&1
