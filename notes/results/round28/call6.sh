#!/usr/bin/env bash
# Round 28, call 6 (H100): launch plans replay host TMA descriptors flat (the compiled launcher called directly,
# a layer buffer's map encoded once), and fp8-block's GEMM path takes its codes and scales from the output's
# allocation. (a) GPU tests: plans bit-identical to unplanned calls (every recipe, M 1..4096, Gluon paths
# included), under CUDA graphs; fp8-block kernels; layers and API (compile, graphs). (b) host time a call
# (probe_host_plans.py; call 4 before). (c) the per-layer cells at 4096² M = 128 / 1024, five rounds.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 330 python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_plan.py tests/kernels/test_fp8_block.py tests/layers tests/test_api.py > $OUT/gpu_tests.log 2>&1
timeout 100 python scripts/probe_host_plans.py --profile fp8-block:4096x4096:128 > $OUT/host_after.log 2>&1
timeout 120 python -m quantkit bench layers --no-plot --shapes 4096x4096 --m 128,1024 --rounds 5 --no-peers --no-floor --json $OUT/m128.json > $OUT/m128.log 2>&1
tail -n 3 $OUT/gpu_tests.log; grep host $OUT/host_after.log | cut -c1-120; grep -E "^  (bf16|fp8|int)" $OUT/m128.log | cut -c1-175
