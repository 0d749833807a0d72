#!/usr/bin/env bash
# Round 32, call 11 (H200): call 10's eager A/B on the H200 (fp8-block at M = 17 / 32 / 64 on the Llama shapes, the
# borrowed entries against the swap-kernel configs of its sweep, call 8), three alternating rounds.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
PROBE_ROUNDS=3 timeout 400 python scripts/probe_eager_configs.py fp8s 17,32,64 14336x4096 4096x14336 4096x4096 \
  > $OUT/h200_eager_fp8s.log 2>&1
echo "probe rc=$?"
