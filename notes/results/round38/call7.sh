#!/usr/bin/env bash
# Round 38, call 7 (H100): an experiment. The weight-only grouped kernels with SWAP (acc^T [BLOCK_N, BLOCK_M] = W x^T:
# the weight converted in registers as the dot's A operand, which wgmma can read from registers, where as the B
# operand it goes through shared memory). Grids from graphs, against the default (plain) kernels.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env7.txt 2>&1
timeout 300 python scripts/probe_moe_int4.py notes/results/round38/moe_before.py --no-before --grid --swap --rounds 3 --recipe int8-weight-only --cells qwen3-30b-a3b:16,qwen3-30b-a3b:256,qwen3-30b-a3b:2048,mixtral-8x7b:256,mixtral-8x7b:2048 > $OUT/r/swap_int8.log 2>&1
echo "int8 rc=$?"; grep -v "^  .*µs (" $OUT/r/swap_int8.log | head -30
timeout 250 python scripts/probe_moe_int4.py notes/results/round38/moe_before.py --no-before --grid --swap --rounds 3 --recipe int4-weight-only --cells qwen3-30b-a3b:2048,mixtral-8x7b:16,mixtral-8x7b:256,mixtral-8x7b:2048 > $OUT/r/swap_int4.log 2>&1
echo "int4 rc=$?"; grep -v "^  .*µs (" $OUT/r/swap_int4.log | head -30
date -u >> $OUT/r/env7.txt
