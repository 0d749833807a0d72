#!/usr/bin/env bash
# Round 29, call 7 (H100): fp8-block 4096x14336 M = 1024 now runs the Gluon GEMM with TMA stores (call 3 read it at
# 1.16x on cuBLAS, a 201.8 µs round). The shipped table's GPU tests at the benchmark shapes, then fp8-block at
# M = 1024 / 4096 on every shape, five rounds, twice.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 200 python -m pytest -q -p no:cacheprovider tests/kernels/test_fp8_block.py::test_real_shapes_gpu \
  "tests/kernels/test_plan.py::test_planned_layers_match_unplanned_kernels_gpu[fp8-block]" \
  > $OUT/gpu_tests_fp8_table2.log 2>&1
tail -n 2 $OUT/gpu_tests_fp8_table2.log
for i in 1 2; do
  timeout 150 python -m quantkit bench layers --no-plot --no-peers --rounds 5 --recipes fp8-block --m 1024,4096 \
    --json $OUT/bench_fp8_large_$i.json > $OUT/bench_fp8_large_$i.log 2>&1
  grep -A8 "### Speedup over bf16" $OUT/bench_fp8_large_$i.md | tail -6
done
