#!/usr/bin/env bash
# Round 32, call 3 (H100): the new tables' entries (1024x4096 at M = 32 / 64, both 8-bit-activation families)
# and defaults (N <= 2048 at 16 < M <= 64: the decode kernel): the families' GPU tests; then the k / v change inside
# the CUDA-graph decode step at batch 32 and 64 (five alternating rounds), against what ran there before.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 330 python -m pytest -q -p no:cacheprovider -m gpu -n 12 --durations=8 tests/kernels/test_aq_decode_sm90.py \
  tests/kernels/test_fp8_block.py tests/kernels/test_int8_dynamic.py tests/kernels/test_tuning.py \
  tests/kernels/test_one_allocation.py tests/kernels/test_plan.py > $OUT/gpu_tests_tables.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/gpu_tests_tables.log)"
grep -E "FAILED|Error" $OUT/gpu_tests_tables.log | head -20
for set in fp8_b32_kv int8dyn_b32_kv fp8_b64_kv int8dyn_b64_kv; do
  timeout 200 python scripts/probe_decode_step_configs.py $set --rounds 5 > $OUT/step_$set.log 2>&1
  echo "$set rc=$? $(tail -n 2 $OUT/step_$set.log | cut -c1-60 | tr '\n' '|')"
done
