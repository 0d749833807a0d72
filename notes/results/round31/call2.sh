#!/usr/bin/env bash
# Round 31, call 2 (H100): fp8-block's Gluon GEMM with split-K at M = 64-256, eager A/B through the planned
# layer; then the GPU tests of the change (8 pytest-xdist processes).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
PROBE_ROUNDS=4 timeout 230 python scripts/probe_eager_configs.py fp8m 128,64,256 4096x4096 4096x14336 14336x4096 1024x4096 \
  > $OUT/eager_fp8m_split.log 2>&1
echo "probe rc=$?"
timeout 330 python -m pytest -q -p no:cacheprovider -m gpu -n 8 --durations=8 tests/kernels/test_f8_gemm_sm90.py \
  tests/kernels/test_one_allocation.py tests/kernels/test_fp8_block.py tests/kernels/test_plan.py > $OUT/gpu_tests_split.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/gpu_tests_split.log)"
grep -E "FAILED|Error" $OUT/gpu_tests_split.log | head -20
