#!/usr/bin/env bash
# Round 27, call 5 (H100): the 8-bit decode GPU tests on the new fp8 entries; int8 weight-only's decode
# kernel on 128-deep chunks with SUB 2 / x at use at M = 16 (its grids took 64-deep chunks only);
# fp8-block per layer at M = 1 and 16 on the new table.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 200 python -m pytest -q -p no:cacheprovider -m gpu -rfs tests/kernels/test_aq_decode_sm90.py > $OUT/gpu_tests_aq_decode.log 2>&1
echo "pytest rc $?" >> $OUT/gpu_tests_aq_decode.log
d() { echo "{\"kernel\": \"decode\", \"MT\": $1, \"WK\": $2, \"WM\": $3, \"DK\": $4, \"SUB\": $5, \"XPF\": $6}"; }
timeout 200 python scripts/probe_ab_configs.py int8_weight_only 16 4096x4096,14336x4096,4096x14336 5 \
  "$(d 1 4 1 128 2 false)" "$(d 1 4 1 128 1 false)" "$(d 1 2 1 128 2 false)" "$(d 2 4 1 128 1 false)" \
  "$(d 1 4 2 128 2 false)" "$(d 2 2 1 128 2 false)" "$(d 1 4 1 64 2 false)" "$(d 1 8 1 128 1 false)" \
  > $OUT/ab_int8wo_dk128_m16.log 2>&1
timeout 150 python -m quantkit bench layers --no-plot --no-peers --rounds 3 --recipes fp8-block --m 1,16 \
  --json $OUT/bench_layers_fp8_m1_16.json > $OUT/bench_layers_fp8_m1_16.log 2>&1
