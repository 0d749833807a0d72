#!/usr/bin/env bash
# Round 29, call 2 (H100): launch plans replay op arguments that view the output's block through another dtype
# (fp8-block's cuBLAS path reads its fp8 codes and float32 scales from behind the bf16 output). The two tests
# call 1 failed on, the plan tests, which cells replay a plan and their host µs, then fp8-block at M >= 1024
# (the cuBLAS cells) beside bf16.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 300 python -m pytest -q -p no:cacheprovider tests/kernels/test_one_allocation.py tests/kernels/test_plan.py \
  > $OUT/gpu_tests_plans.log 2>&1
tail -n 4 $OUT/gpu_tests_plans.log
timeout 90 python scripts/probe_host_plans.py --cells 4096x4096:1024,4096 14336x4096:1024,4096 4096x14336:1024 \
  > $OUT/host_plans.log 2>&1
grep -i "fp8\|bf16" $OUT/host_plans.log | head -20
timeout 180 python -m quantkit bench layers --no-plot --no-peers --rounds 3 --recipes fp8-block --m 1024,4096 \
  --json $OUT/bench_fp8_large.json > $OUT/bench_fp8_large.log 2>&1
grep -A8 "### Speedup over bf16" $OUT/bench_fp8_large.md 2>/dev/null || tail -n 20 $OUT/bench_fp8_large.log
