#!/usr/bin/env bash
# Round 27, call 8 (H100): fp8-block's SUB 2 / x-at-use programs at M = 2 and 4 (DIAG and plain) and at
# 14336×4096 M = 16 with two row warps; int8 weight-only's `stream` kernel at 4096² M = 16 with 2 warps and
# deeper rings (its grids took 4 and 8 warps, 2-4 stages).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
f() { echo "{\"kernel\": \"decode\", \"MT\": $1, \"WK\": $2, \"WM\": $3, \"DK\": 128, \"SUB\": $4, \"BM\": 16, \"PDL\": true, \"fuse_act_quant\": false, \"XPF\": false$5}"; }
S=4096x4096,14336x4096,4096x14336
for m in 2 4; do
  timeout 150 python scripts/probe_ab_configs.py fp8_block $m $S 5 \
    "$(f 1 4 1 2 '')" "$(f 1 4 1 2 ', "DIAG": true')" "$(f 1 2 1 2 ', "DIAG": true')" "$(f 2 2 1 2 ', "DIAG": true')" \
    "$(f 1 4 1 1 ', "DIAG": true')" > $OUT/ab_fp8_sub2_m$m.log 2>&1
done
timeout 100 python scripts/probe_ab_configs.py fp8_block 16 14336x4096 5 "$(f 1 2 2 2 '')" "$(f 1 2 1 2 '')" \
  > $OUT/ab_fp8_sub2_m16_gateup.log 2>&1
s() { echo "{\"kernel\": \"stream\", \"BLOCK_N\": $1, \"BLOCK_M\": 16, \"BLOCK_K\": $2, \"num_warps\": $3, \"num_stages\": $4}"; }
timeout 150 python scripts/probe_ab_configs.py int8_weight_only 16 4096x4096,4096x14336 5 \
  "$(s 16 512 2 4)" "$(s 16 256 2 4)" "$(s 8 512 2 4)" "$(s 16 512 4 5)" "$(s 16 512 4 6)" "$(s 16 1024 4 3)" \
  "$(s 16 1024 8 3)" "$(s 16 256 2 6)" > $OUT/ab_int8wo_stream_m16.log 2>&1
