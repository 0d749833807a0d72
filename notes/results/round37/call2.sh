#!/usr/bin/env bash
# Round 37, call 2 (H100): the grouped MoE kernels (quantkit/kernels/moe.py) for the weight-only formats. Their GPU
# tests and the experts' GPU tests, then scripts/bench_moe.py again (the weight-only recipes now on the grouped
# kernels, their loop beside them; fp8-block and int8-dynamic on the loop that sorts the slots once).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env2.txt 2>&1
timeout 300 python -m pytest -q -p no:cacheprovider -m gpu -n 8 -rs tests/kernels/test_moe.py tests/layers/test_experts.py > $OUT/r/gpu_tests_moe.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_moe.log)"
grep -E "^FAILED|^ERROR|^E  " $OUT/r/gpu_tests_moe.log | head -20
timeout 280 python scripts/bench_moe.py --rounds 3 --json $OUT/r/bench_moe.json > $OUT/r/bench_moe.log 2>&1
echo "bench rc=$?"; grep -v Warning $OUT/r/bench_moe.log | head -100
date -u >> $OUT/r/env2.txt
