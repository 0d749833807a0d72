#!/usr/bin/env bash
# Round 32, call 12 (H100): the whole GPU test suite on the final tables (12 pytest-xdist processes); then fp8-block's
# decode step at batch 32 / 64 with every round-32 entry against what ran there before (five alternating rounds).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/env_final.txt
timeout 440 python -m pytest -q -p no:cacheprovider -m gpu -n 12 --durations=15 > $OUT/gpu_tests_final.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/gpu_tests_final.log)"
grep -E "FAILED|Error" $OUT/gpu_tests_final.log | head -20
for set in fp8_b32_round32 fp8_b64_round32; do
  timeout 70 python scripts/probe_decode_step_configs.py $set --rounds 5 > $OUT/step_$set.log 2>&1
  echo "$set rc=$? $(tail -n 2 $OUT/step_$set.log | cut -c1-60 | tr '\n' '|')"
done
