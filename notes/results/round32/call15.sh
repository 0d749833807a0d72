#!/usr/bin/env bash
# Round 32, call 15 (H100): fp8-block's swap kernel at M = 32 on the Llama shapes, a wider grid than the sweep's
# (x tiles of 16-64 rows, 1-2 K blocks a step, 3-5 stages, split-K 1-4, PDL): CUDA-graph GPU time, L2 flushed.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 420 python scripts/probe_config_grid.py fp8sw 32 14336x4096 4096x14336 4096x4096 > $OUT/grid_fp8sw_m32.log 2>&1
echo "grid rc=$?"; grep -A4 "shipped" $OUT/grid_fp8sw_m32.log | cut -c1-200
