#!/usr/bin/env bash
# Round 38, call 2 (H100): int4's 128-row tiles from call 1's grid, the loop only from 256 rows an expert, the
# stacks' probe without the buffers() generator. scripts/bench_moe.py (the figures), then the host time again.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env2.txt 2>&1
timeout 120 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs tests/kernels/test_moe.py -k "int4 or compile" > $OUT/r/gpu_tests_int4.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_int4.log)"
grep -E "^FAILED|^ERROR|^E  .*Error|^E   *assert|^E   *Assert" $OUT/r/gpu_tests_int4.log | head -20
timeout 330 python scripts/bench_moe.py --rounds 3 --json $OUT/r/bench_moe.json > $OUT/r/bench_moe.log 2>&1
echo "bench rc=$?"; grep -v Warning $OUT/r/bench_moe.log | head -130
timeout 60 python scripts/probe_moe_host.py --top 8 > $OUT/r/host.log 2>&1
echo "host rc=$?"; grep -E "eager" $OUT/r/host.log
date -u >> $OUT/r/env2.txt
