#!/usr/bin/env bash
# Round 27, call 1 (H100): (a) the int4 decode kernel with cheaper conversion PTX (timing only);
# (b) split-K modelled as the same bytes at 8192x2048 and 16384x1024, for the 4096² M = 16 entries.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/device.txt 2>&1
S=4096x4096,8192x2048,16384x1024
timeout 150 python scripts/probe_ab_configs.py int8_dynamic 16 $S 5 \
  '{"BM": 16, "DK": 128, "MT": 1, "PDL": true, "SUB": 1, "WK": 4, "WM": 1, "kernel": "decode"}' > $OUT/split_model_int8_dynamic.log 2>&1
timeout 150 python scripts/probe_ab_configs.py fp8_block 16 $S 5 \
  '{"BM": 16, "DK": 128, "MT": 1, "PDL": true, "SUB": 1, "WK": 4, "WM": 1, "fuse_act_quant": false, "kernel": "decode"}' > $OUT/split_model_fp8_block.log 2>&1
timeout 150 python scripts/probe_ab_configs.py int8_weight_only 16 $S 5 \
  '{"BLOCK_K": 512, "BLOCK_M": 16, "BLOCK_N": 16, "kernel": "stream", "num_stages": 4, "num_warps": 4}' \
  '{"DK": 64, "MT": 1, "SUB": 1, "WK": 4, "WM": 1, "XPF": false, "kernel": "decode"}' > $OUT/split_model_int8_weight_only.log 2>&1
timeout 280 python scripts/probe_decode_convert.py 4 > $OUT/decode_convert.log 2>&1
echo done >> $OUT/decode_convert.log
