#!/usr/bin/env bash
# Round 27, call 2 (H100): the 8-bit decode kernel (aq_decode_sm90) with SUB 2 / 4 chunks a warp and trip
# (no earlier grid of fp8-block or int8-dynamic tried SUB > 1), at M = 16 on the three Llama shapes.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
S=4096x4096,14336x4096,4096x14336
cfgs() {  # $1: extra keys
  for c in '"MT": 1, "WK": 4, "DK": 128, "SUB": 2, "XPF": true' '"MT": 1, "WK": 4, "DK": 128, "SUB": 2, "XPF": false' \
           '"MT": 1, "WK": 2, "DK": 128, "SUB": 2, "XPF": true' '"MT": 1, "WK": 2, "DK": 128, "SUB": 2, "XPF": false' \
           '"MT": 1, "WK": 4, "DK": 64, "SUB": 2, "XPF": true' '"MT": 1, "WK": 4, "DK": 64, "SUB": 4, "XPF": true' \
           '"MT": 1, "WK": 2, "DK": 64, "SUB": 4, "XPF": true' '"MT": 1, "WK": 8, "DK": 64, "SUB": 2, "XPF": true' \
           '"MT": 2, "WK": 2, "DK": 128, "SUB": 2, "XPF": false' '"MT": 1, "WK": 4, "DK": 128, "SUB": 4, "XPF": false' \
           '"MT": 2, "WK": 4, "DK": 64, "SUB": 2, "XPF": true'; do
    echo "{\"kernel\": \"decode\", \"BM\": 16, \"WM\": 1, \"PDL\": true, $c$1}"
  done
}
mapfile -t I8 < <(cfgs "")
mapfile -t F8 < <(cfgs ', "fuse_act_quant": false')
timeout 280 python scripts/probe_ab_configs.py int8_dynamic 16 $S 5 "${I8[@]}" > $OUT/sub_int8_dynamic.log 2>&1
timeout 280 python scripts/probe_ab_configs.py fp8_block 16 $S 5 "${F8[@]}" > $OUT/sub_fp8_block.log 2>&1
