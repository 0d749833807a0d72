#!/usr/bin/env bash
# Round 30, call 2 (H100): int8 weight-only M = 16 `stream` programs with two warps at 4096² and 4096x14336 (call 1:
# -1.1 % at 4096², every round); fp8-block 4096² M = 16 on the `stream` kernel with 16 x rows (BLOCK_X 16).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
S='"BLOCK_M": 16, "BLOCK_N": 16, "kernel": "stream"'
timeout 200 python scripts/probe_ab_configs.py int8_weight_only 16 4096x4096,4096x14336 9 \
  "{\"BLOCK_K\": 512, $S, \"num_stages\": 4, \"num_warps\": 2}" \
  "{\"BLOCK_K\": 256, $S, \"num_stages\": 6, \"num_warps\": 2}" \
  "{\"BLOCK_K\": 1024, $S, \"num_stages\": 3, \"num_warps\": 2}" \
  > $OUT/ab_int8wo_m16_w2b.log 2>&1
cat $OUT/ab_int8wo_m16_w2b.log
F='"kernel": "stream", "BLOCK_X": 16'
timeout 200 python scripts/probe_ab_configs.py fp8_block 16 4096x4096 5 \
  "{$F, \"BLOCK_W\": 16, \"fuse_act_quant\": true, \"num_warps\": 4, \"num_stages\": 3}" \
  "{$F, \"BLOCK_W\": 16, \"fuse_act_quant\": true, \"num_warps\": 4, \"num_stages\": 4}" \
  "{$F, \"BLOCK_W\": 16, \"fuse_act_quant\": true, \"num_warps\": 8, \"num_stages\": 3}" \
  "{$F, \"BLOCK_W\": 16, \"fuse_act_quant\": true, \"num_warps\": 2, \"num_stages\": 4}" \
  "{$F, \"BLOCK_W\": 32, \"fuse_act_quant\": true, \"num_warps\": 4, \"num_stages\": 3}" \
  "{$F, \"BLOCK_W\": 16, \"fuse_act_quant\": false, \"num_warps\": 4, \"num_stages\": 3}" \
  > $OUT/ab_fp8_m16_stream.log 2>&1
cat $OUT/ab_fp8_m16_stream.log
