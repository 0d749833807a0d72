#!/usr/bin/env bash
# Round 34, call 5 (H100): int4 weight-only at group sizes 32 and 64, which call 4 read far below group 128 (g32:
# 0.63-0.69x at M = 1024, 0.74-0.95x at M = 128, 1.09x at 4096² M = 16). The config that runs now against the
# candidates and group-reshaped variants (scripts/probe_int4_groups.py), three alternating rounds.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
date -u > $OUT/r/env5.txt
timeout 420 python scripts/probe_int4_groups.py 3 32,64 16,128,1024 4096x4096,14336x4096,4096x14336 \
  > $OUT/r/int4_groups_probe.log 2>&1
echo "probe rc=$?"
timeout 100 python scripts/probe_int4_groups.py 3 32 4096 4096x4096 > $OUT/r/int4_groups_probe_m4096.log 2>&1
echo "probe2 rc=$?"
grep "^g" $OUT/r/int4_groups_probe.log $OUT/r/int4_groups_probe_m4096.log | cut -c1-330
date -u >> $OUT/r/env5.txt
tar czf $OUT/call5.tgz -C $OUT r
