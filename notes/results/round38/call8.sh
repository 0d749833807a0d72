#!/usr/bin/env bash
# Round 38, call 8 (H100): SWAP shipped for the weight-only formats' 128-row blocks (call 7). The MoE GPU tests, then
# Mixtral-8x7B's block at 256 and 2048 tokens (scripts/bench_moe.py).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env8.txt 2>&1
timeout 240 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs tests/kernels/test_moe.py tests/layers/test_experts.py > $OUT/r/gpu_tests_moe.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_moe.log)"
grep -E "^FAILED|^ERROR|^E  .*Error|^E   *assert|^E   *Assert" $OUT/r/gpu_tests_moe.log | head -20
timeout 150 python scripts/bench_moe.py --shapes mixtral-8x7b --tokens 256,2048 --recipes int8-weight-only,int4-weight-only --rounds 3 > $OUT/r/bench_moe_mixtral.log 2>&1
echo "bench rc=$?"; grep -v Warning $OUT/r/bench_moe_mixtral.log | head -40
date -u >> $OUT/r/env8.txt
