#!/usr/bin/env bash
# Round 34, call 9 (H100): the final code. int4 per layer at groups 32 / 64 / 128 / 256 (three rounds; call 4 is the
# before side), then the whole GPU test suite (12 pytest-xdist processes).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/r/env9.txt
date -u >> $OUT/r/env9.txt
timeout 150 python -m quantkit bench layers --no-plot --no-peers --no-floor --no-gpu-time --rounds 3 \
  --recipes "int4-weight-only:group_size=32" "int4-weight-only:group_size=64" int4-weight-only \
  "int4-weight-only:group_size=256" --json $OUT/r/int4_groups_final.json > $OUT/r/int4_groups_final.log 2>&1
echo "bench rc=$?"
sed -n '/### Speedup/,/^### /p' $OUT/r/int4_groups_final.md | head -22
date -u >> $OUT/r/env9.txt
timeout 420 python -m pytest -q -p no:cacheprovider -m gpu -n 12 --durations=10 > $OUT/r/gpu_tests_final.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_final.log)"
grep -E "^FAILED|^ERROR" $OUT/r/gpu_tests_final.log | head -20
date -u >> $OUT/r/env9.txt
tar czf $OUT/call9.tgz -C $OUT r
