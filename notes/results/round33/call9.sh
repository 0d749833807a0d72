#!/usr/bin/env bash
# Round 33, call 9 (H100): fp8-block at M = 64 on the wide layers, where 18944 x 3584 lost 1.49 -> 1.36x with the new
# default swap program and 12288 x 4096, 13824 x 5120, 28672 x 8192 gained: which part of the program does it.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
PROBE_ROUNDS=3 timeout 300 python scripts/probe_eager_configs.py fp8w 64 18944x3584 12288x4096 13824x5120 28672x8192 \
  > $OUT/r/eager_fp8w.log 2>&1
echo "fp8w rc=$?"
tar czf $OUT/call9.tgz -C $OUT r
