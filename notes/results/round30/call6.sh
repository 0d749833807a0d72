#!/usr/bin/env bash
# Round 30, call 6 (H100): clock and power again, now also from CUDA graphs of 20 calls with and without do_bench's
# 256 MB flush before each (call 1's do_bench loop called the layer unplanned, so its host time left the GPU idle
# between calls: 140 µs eager against ~121 µs of GPU time).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
for fam in int8_dynamic fp8_block int8_weight_only; do
  timeout 150 python scripts/probe_power_waves.py $fam 4096 4096 4096 3 3 > $OUT/power_graph_$fam.log 2>&1
  sed -n '/^1\./,/^2\./p' $OUT/power_graph_$fam.log
done
