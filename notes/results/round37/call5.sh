#!/usr/bin/env bash
# Round 37, call 5 (H100): align() as one Triton program at decode sizes and cached launches (host time of the
# eager grouped path). GPU tests of the kernels and the experts, then scripts/bench_moe.py.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env5.txt 2>&1
timeout 300 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs tests/kernels/test_moe.py tests/layers/test_experts.py > $OUT/r/gpu_tests_moe.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_moe.log)"
grep -E "^FAILED|^ERROR|^E  .*Error|^E   *assert|^E   *Assert" $OUT/r/gpu_tests_moe.log | head -30
timeout 270 python scripts/bench_moe.py --rounds 3 --json $OUT/r/bench_moe.json > $OUT/r/bench_moe.log 2>&1
echo "bench rc=$?"; grep -v Warning $OUT/r/bench_moe.log | head -130
date -u >> $OUT/r/env5.txt
