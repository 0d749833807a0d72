#!/usr/bin/env bash
# Round 30, call 1 (H100): is int8-dynamic / fp8-block 4096² M = 4096 bound by power or by tile waves under the
# benchmark's timer (scripts/probe_power_waves.py); int8 weight-only 4096² M = 16 on two-warp `stream` programs.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv | tee $OUT/gpu.txt
timeout 150 python scripts/probe_power_waves.py int8_dynamic 4096 4096 4096 5 3 > $OUT/power_waves_int8dyn.log 2>&1
cat $OUT/power_waves_int8dyn.log
timeout 150 python scripts/probe_power_waves.py fp8_block 4096 4096 4096 5 3 > $OUT/power_waves_fp8.log 2>&1
cat $OUT/power_waves_fp8.log
timeout 150 python scripts/probe_ab_configs.py int8_weight_only 16 4096x4096 7 \
  '{"BLOCK_K": 512, "BLOCK_M": 16, "BLOCK_N": 16, "kernel": "stream", "num_stages": 4, "num_warps": 2}' \
  '{"BLOCK_K": 256, "BLOCK_M": 16, "BLOCK_N": 16, "kernel": "stream", "num_stages": 6, "num_warps": 2}' \
  '{"BLOCK_K": 512, "BLOCK_M": 16, "BLOCK_N": 16, "kernel": "stream", "num_stages": 3, "num_warps": 2}' \
  > $OUT/ab_int8wo_m16_w2.log 2>&1
cat $OUT/ab_int8wo_m16_w2.log
