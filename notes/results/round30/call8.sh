#!/usr/bin/env bash
# Round 30, call 8 (H100, run after call 9): the GPU test suite on the final tree, second half (int4 and the decode
# kernel, plans and tuning, accuracy on the real all-MiniLM-L6-v2 carried as .carry/minilm, checkpoints, layers,
# benchmarks, rounding). int8 weight-only's GPU tests ran in call 3. Each group stops at the call's deadline.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT
end=$(( $(date +%s) + 570 ))
for p in tests/kernels/test_wo_decode_sm90.py tests/kernels/test_int4_weight_only.py \
         "tests/kernels/test_plan.py tests/kernels/test_one_allocation.py tests/kernels/test_launch.py tests/kernels/test_tuning.py tests/test_tune_cli.py" \
         "tests/checkpoint tests/layers tests/rounding" tests/accuracy tests/bench tests/kernels/test_int4_search.py; do
  left=$(( end - $(date +%s) )); [ $left -lt 20 ] && { echo "$p: not run (deadline)"; continue; }
  name=$(echo $p | awk '{print $1}' | tr '/' '_')
  timeout $left python -m pytest -q -p no:cacheprovider -m gpu $p > $OUT/gpu_$name.log 2>&1
  echo "$p rc=$? $(grep -E 'passed|failed' $OUT/gpu_$name.log | tail -n 1)"
done
