#!/usr/bin/env bash
# Round 34, call 7 (H100): int4 configs fitted to groups under 128 (_fit_group: the decode kernel for the small
# kernel at 8 < M <= 16; dequant_mm for the Gluon GEMM whose K step a group of 32 cuts, from M = 1024 at 2^35
# multiply-adds). The int4 family's and layers' GPU tests, then call 4's per-layer bench again (groups 32 / 64 /
# 128 / 256, three rounds) for the after side.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
date -u > $OUT/r/env7.txt
timeout 300 python -m pytest -q -p no:cacheprovider -m gpu -n 10 tests/kernels/test_int4_weight_only.py \
  tests/kernels/test_wo_decode_sm90.py tests/layers tests/kernels/test_plan.py > $OUT/r/gpu_tests_groups.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_groups.log)"
grep -E "^FAILED|Error" $OUT/r/gpu_tests_groups.log | head -10
timeout 260 python -m quantkit bench layers --no-plot --no-peers --no-floor --rounds 3 \
  --recipes "int4-weight-only:group_size=32" "int4-weight-only:group_size=64" int4-weight-only \
  "int4-weight-only:group_size=256" --json $OUT/r/int4_groups_after.json > $OUT/r/int4_groups_after.log 2>&1
echo "bench rc=$?"
sed -n '/### Speedup/,/^### GPU/p' $OUT/r/int4_groups_after.md | head -22
date -u >> $OUT/r/env7.txt
tar czf $OUT/call7.tgz -C $OUT r
