#!/usr/bin/env bash
# Round 33, call 6 (H100): call 1's per-layer bench on the final defaults, three rounds a cell (median), M = 16-2048.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/r/env6.txt
SHAPES=2048x2048,512x2048,8192x2048,2048x8192,3584x3584,512x3584,18944x3584,3584x18944,12288x4096,4096x12288
SHAPES=$SHAPES,5120x5120,13824x5120,5120x13824,8192x8192,28672x8192,8192x28672
timeout 570 python -m quantkit bench layers --no-plot --no-peers --no-floor --no-gpu-time --rounds 3 \
  --shapes $SHAPES --m 16,64,256,2048 --json $OUT/r/other_shapes_final.json > $OUT/r/other_shapes_final.log 2>&1
echo "bench rc=$?"
tar czf $OUT/call6.tgz -C $OUT r
