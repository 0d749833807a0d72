#!/usr/bin/env bash
# Round 39, call 15 (H100): after the review's simplification of planned()'s key and replay (behaviour unchanged),
# the plan tests and the MoE replay test on the GPU.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
timeout 150 python -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_plan.py tests/kernels/test_moe.py -k "plan or replay" > $R/gpu_tests.log 2>&1
echo "tests rc=$? $(tail -n 1 $R/gpu_tests.log)"; grep -E "^FAILED|^E  " $R/gpu_tests.log | head
