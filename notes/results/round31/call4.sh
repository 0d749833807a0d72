#!/usr/bin/env bash
# Round 31, call 4 (H200, which borrows the H100 fp8-block table): the split-K A/B of call 2 on the two shapes
# whose entries changed.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
PROBE_ROUNDS=4 timeout 300 python scripts/probe_eager_configs.py fp8m 64,128,256 4096x4096 4096x14336 \
  > $OUT/h200_eager_fp8m_split.log 2>&1
echo "probe rc=$?"
