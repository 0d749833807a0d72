#!/usr/bin/env bash
# Round 32, call 5 (H100): the weight-only families' new entries (1024x4096 at M = 32 / 64) and defaults (N <= 1024
# at 16 < M <= 64: the M = 16 Triton programs): their GPU tests; the k / v change inside the CUDA-graph decode step
# at batch 32 and 64 (five alternating rounds) against the Gluon GEMM that ran there before.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 300 python -m pytest -q -p no:cacheprovider -m gpu -n 12 --durations=8 tests/kernels/test_int4_weight_only.py \
  tests/kernels/test_int8_weight_only.py tests/kernels/test_tuning.py > $OUT/gpu_tests_wo.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/gpu_tests_wo.log)"
grep -E "FAILED|Error" $OUT/gpu_tests_wo.log | head -20
for set in int4_b32_kv int8wo_b32_kv int4_b64_kv int8wo_b64_kv; do
  timeout 170 python scripts/probe_decode_step_configs.py $set --rounds 5 > $OUT/step_$set.log 2>&1
  echo "$set rc=$? $(tail -n 2 $OUT/step_$set.log | cut -c1-60 | tr '\n' '|')"
done
