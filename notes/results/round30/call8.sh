#!/usr/bin/env bash
# Round 30, call 8 (H100): the GPU test suite on the final tree, second half (int4 and the decode kernel, tuning,
# plans, accuracy on the real all-MiniLM-L6-v2 carried as .carry/minilm, benchmarks, checkpoints, layers, rounding).
# int8 weight-only's GPU tests ran in call 3.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT
for p in tests/kernels/test_wo_decode_sm90.py tests/kernels/test_int4_weight_only.py tests/kernels/test_int4_search.py \
         "tests/kernels/test_tuning.py tests/kernels/test_plan.py tests/kernels/test_one_allocation.py tests/kernels/test_launch.py tests/test_tune_cli.py" \
         tests/accuracy "tests/bench tests/checkpoint tests/layers tests/rounding"; do
  name=$(echo $p | awk '{print $1}' | tr '/' '_')
  timeout 300 python -m pytest -q -p no:cacheprovider -m gpu $p > $OUT/gpu_$name.log 2>&1
  echo "$p rc=$? $(tail -n 1 $OUT/gpu_$name.log)"
done
