#!/usr/bin/env bash
# Round 31, call 7 (H200, which borrows the H100 table): M = 32 (and 17), which borrow the new split-K entries (4096² from M = 64, 4096x14336 from
# M = 128): the same eager A/B.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
PROBE_ROUNDS=4 timeout 300 python scripts/probe_eager_configs.py fp8m 32,17 4096x4096 4096x14336 \
  > $OUT/h200_eager_fp8m_split_m32.log 2>&1
echo "probe rc=$?"
