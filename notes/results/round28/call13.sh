#!/usr/bin/env bash
# Round 28, call 13 (H100): int8-dynamic's two-kernel path (M > 16) takes its codes, scales and split-K partials from
# the output's allocation, as fp8-block's now does. GPU tests: one allocation a call at M = 128 / 1024 for both
# families (bit-identical between calls), int8-dynamic's planned layers against the unplanned kernels, and the
# family's GPU tests.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 420 python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_aq_decode_sm90.py::test_gemm_sizes_allocate_only_the_output_block_gpu "tests/kernels/test_plan.py::test_planned_layers_match_unplanned_kernels_gpu[int8-dynamic]" tests/kernels/test_int8_dynamic.py > $OUT/gpu_tests_int8dyn_workspace.log 2>&1
tail -n 3 $OUT/gpu_tests_int8dyn_workspace.log
