#!/usr/bin/env bash
# Round 33, call 8 (H200): call 7 on an H200 — call 6's bench at the round's starting commit (bb9fc19, the old defaults) and at the final
# code, back to back on one machine, three rounds a cell each: the before / after table of BENCHMARKS.md, round 33.
set -u
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r /tmp/old
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/r/env8.txt
git archive bb9fc19 | tar -x -C /tmp/old || { echo "no git archive"; exit 1; }
SHAPES=2048x2048,512x2048,8192x2048,2048x8192,3584x3584,512x3584,18944x3584,3584x18944,12288x4096,4096x12288
SHAPES=$SHAPES,5120x5120,13824x5120,5120x13824,8192x8192,28672x8192,8192x28672
ARGS="--no-plot --no-peers --no-floor --no-gpu-time --rounds 3 --shapes $SHAPES --m 16,64,256,2048"
(cd /tmp/old && PYTHONPATH=/tmp/old timeout 270 python -m quantkit bench layers $ARGS \
  --json $OUT/r/h200_ab_before.json > $OUT/r/h200_ab_before.log 2>&1); echo "before rc=$?"
PYTHONPATH=$PWD timeout 270 python -m quantkit bench layers $ARGS --json $OUT/r/h200_ab_after.json > $OUT/r/h200_ab_after.log 2>&1
echo "after rc=$?"
tar czf $OUT/call8.tgz -C $OUT r
