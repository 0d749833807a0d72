#!/usr/bin/env bash
# Round 27, call 14 (H100): the 8-bit decode GPU tests with the 1024×4096 entry's program among the candidates;
# fp8-block per layer at M = 16 on 1024×4096 and 4096²; the end-to-end benchmark on the final tables.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 200 python -m pytest -q -p no:cacheprovider -m gpu -rfs tests/kernels/test_aq_decode_sm90.py > $OUT/gpu_tests_aq_decode_final.log 2>&1
echo "pytest rc $?" >> $OUT/gpu_tests_aq_decode_final.log
timeout 100 python -m quantkit bench layers --no-plot --no-peers --rounds 3 --recipes fp8-block --m 16 \
  --shapes 1024x4096,4096x4096 --json $OUT/bench_layers_fp8_m16_kv.json > $OUT/bench_layers_fp8_m16_kv.log 2>&1
timeout 150 python -m quantkit bench e2e --json $OUT/bench_e2e_final.json > $OUT/bench_e2e_final.log 2>&1
