#!/usr/bin/env bash
# Round 29, call 5 (H100): the H100 entry for fp8-block 4096² M = 4096 is now the Gluon GEMM with TMA stores (call 4:
# cuBLAS 0.98-1.28x eagerly on this host, the Gluon GEMM 1.16-1.22x). GPU tests of the shipped table at the
# benchmark shapes and the planned layers, then the whole per-layer table on the final tree.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 240 python -m pytest -q -p no:cacheprovider tests/kernels/test_fp8_block.py::test_real_shapes_gpu \
  "tests/kernels/test_plan.py::test_planned_layers_match_unplanned_kernels_gpu[fp8-block]" \
  > $OUT/gpu_tests_fp8_table.log 2>&1
tail -n 3 $OUT/gpu_tests_fp8_table.log
timeout 330 python -m quantkit bench layers --no-plot --no-peers --rounds 3 --json $OUT/bench_layers.json \
  > $OUT/bench_layers.log 2>&1
grep -A20 "### Speedup over bf16" $OUT/bench_layers.md | tail -17
