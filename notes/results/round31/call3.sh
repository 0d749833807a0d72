#!/usr/bin/env bash
# Round 31, call 3 (H100): the final tables (fp8-block split-K entries): the family's and the plans' GPU tests,
# then per layer (five rounds) and end to end.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 200 python -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_fp8_block.py tests/kernels/test_plan.py \
  tests/layers tests/test_api.py > $OUT/gpu_tests_tables.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/gpu_tests_tables.log)"
timeout 200 python -m quantkit bench layers --no-plot --no-peers --rounds 5 --json $OUT/bench_layers_r5.json > $OUT/bench_layers_r5.log 2>&1
echo "layers rc=$?"
timeout 170 python -m quantkit bench e2e --json $OUT/bench_e2e.json > $OUT/bench_e2e.log 2>&1
echo "e2e rc=$?"
cp out/*.md $OUT/ 2>/dev/null; ls $OUT
