#!/usr/bin/env bash
# Round 32, call 13 (H100): end to end on the final tables with batched decoding at 32 and 64 (the round's M = 17-64
# entries), bf16 and every recipe in the same run.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 400 python -m quantkit bench e2e --batches 32,64 --no-plot --json $OUT/bench_e2e_b32_b64.json \
  > $OUT/bench_e2e_b32_b64.log 2>&1
echo "e2e rc=$?"; tail -n 30 $OUT/bench_e2e_b32_b64.log
