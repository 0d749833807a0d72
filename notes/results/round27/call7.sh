#!/usr/bin/env bash
# Round 27, call 7 (H100): the per-layer and end-to-end benchmarks on this round's table, and the fp8-block
# family's GPU tests.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
git log --oneline -1 > $OUT/commit.txt 2>/dev/null || true
timeout 170 python -m quantkit bench layers --no-plot --no-peers --rounds 3 --json $OUT/bench_layers.json > $OUT/bench_layers.log 2>&1
timeout 140 python -m quantkit bench e2e --json $OUT/bench_e2e.json > $OUT/bench_e2e.log 2>&1
timeout 240 python -m pytest -q -p no:cacheprovider -m gpu -rfs tests/kernels/test_fp8_block.py > $OUT/gpu_tests_fp8_block.log 2>&1
echo "pytest rc $?" >> $OUT/gpu_tests_fp8_block.log
