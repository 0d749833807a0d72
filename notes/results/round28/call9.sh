#!/usr/bin/env bash
# Round 28, call 9 (H100): int8-dynamic at 4096², M = 32-256, eagerly: the Triton pointer GEMM with split-K 4 (shipped
# at M = 64 / 128 since round 20 put it back: the Gluon split-K GEMM's launches then cost the host too much) against
# the Gluon configs, now that plans replay descriptor launches flat (scripts/probe_eager_configs.py int8).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 400 python scripts/probe_eager_configs.py int8 32,64,128,256 4096x4096 > $OUT/eager_int8dyn_mid.log 2>&1
cat $OUT/eager_int8dyn_mid.log | cut -c1-150
