#!/usr/bin/env bash
# Round 30, call 4 (H100): int8 weight-only's large-M GEMM under the benchmark's timer (clock, power, waves: is it at
# the power cap like bf16?), then the whole per-layer table again on another machine, five rounds (call 3 read
# int8-dynamic 4096² M = 16 at 0.77x ʰ, two of three rounds host-bound, and int8 weight-only M = 4096 at 0.91-0.94x).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv | tee $OUT/gpu4.txt
timeout 150 python scripts/probe_power_waves.py int8_weight_only 4096 4096 4096 5 3 > $OUT/power_waves_int8wo.log 2>&1
cat $OUT/power_waves_int8wo.log
timeout 400 python -m quantkit bench layers --no-plot --no-peers --rounds 5 --json $OUT/bench_layers_r5.json \
  > $OUT/bench_layers_r5.log 2>&1
grep -A20 "### Speedup over bf16" $OUT/bench_layers_r5.md | tail -17
