#!/usr/bin/env bash
# Round 34, call 4 (H100): int4 weight-only at group sizes 32, 64 and 256 beside 128 (the tables were tuned at 128 and
# are keyed by shape alone, so every group size runs them, or a fallback where a kernel cannot take the group),
# per layer on the issues' cells, three rounds.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/r/env4.txt
date -u >> $OUT/r/env4.txt
timeout 540 python -m quantkit -v bench layers --no-plot --no-peers --no-floor --rounds 3 \
  --recipes "int4-weight-only:group_size=32" "int4-weight-only:group_size=64" int4-weight-only \
  "int4-weight-only:group_size=256" --json $OUT/r/int4_groups.json > $OUT/r/int4_groups.log 2>&1
echo "bench rc=$?"
sed -n '/### Speedup/,/^$/p' $OUT/r/int4_groups.md | head -30
grep -i "kernel\|fallback\|path" $OUT/r/int4_groups.log | sort | uniq -c | sort -rn | head -30
date -u >> $OUT/r/env4.txt
tar czf $OUT/call4.tgz -C $OUT r
