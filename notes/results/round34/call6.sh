#!/usr/bin/env bash
# Round 34, call 6 (H100): int4 at group sizes 32 / 64 at decode sizes (M = 1, 4, 8, 16) on 4096², the k / v
# projection (1024x4096) and 14336x4096: the shipped config against the candidates (call 5 found the decode kernel
# 27 % ahead of the small kernel at 4096² M = 16 with group 32).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
date -u > $OUT/r/env6.txt
timeout 500 python scripts/probe_int4_groups.py 3 32,64 1,4,8,16 4096x4096,1024x4096,14336x4096 \
  > $OUT/r/int4_groups_probe_decode.log 2>&1
echo "probe rc=$?"
grep "^g" $OUT/r/int4_groups_probe_decode.log | cut -c1-300
date -u >> $OUT/r/env6.txt
tar czf $OUT/call6.tgz -C $OUT r
