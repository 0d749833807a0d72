#!/usr/bin/env bash
# Round 30, call 3 (H100): the final tree (int8 weight-only 4096² M = 16 on the two-warp stream program). The family's
# GPU tests and its planned-layer test, then the whole per-layer table and the end-to-end run.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 200 python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_int8_weight_only.py \
  "tests/kernels/test_plan.py::test_planned_layers_match_unplanned_kernels_gpu[int8-weight-only]" \
  > $OUT/gpu_tests_int8wo.log 2>&1
tail -n 3 $OUT/gpu_tests_int8wo.log
timeout 330 python -m quantkit bench layers --no-plot --no-peers --rounds 3 --json $OUT/bench_layers.json \
  > $OUT/bench_layers.log 2>&1
grep -A20 "### Speedup over bf16" $OUT/bench_layers.md | tail -17
timeout 300 python -m quantkit bench e2e --json $OUT/bench_e2e.json > $OUT/bench_e2e.log 2>&1
grep "^| " $OUT/bench_e2e.md | cut -d'|' -f2-10
