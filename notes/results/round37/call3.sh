#!/usr/bin/env bash
# Round 37, call 3 (H100): the grouped MoE kernels with tiles by size (up to 128-row blocks), int4's x loaded whole
# and split, align() without a host synchronization. Their GPU tests (block heights 16-128, a CUDA graph), then
# scripts/bench_moe.py with CUDA-graph replays beside the eager calls.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env3.txt 2>&1
timeout 300 python -m pytest -q -p no:cacheprovider -m gpu -n 8 -rs tests/kernels/test_moe.py > $OUT/r/gpu_tests_moe.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_moe.log)"
grep -E "^FAILED|^ERROR|^E  " $OUT/r/gpu_tests_moe.log | head -20
timeout 280 python scripts/bench_moe.py --rounds 3 --json $OUT/r/bench_moe.json > $OUT/r/bench_moe.log 2>&1
echo "bench rc=$?"; grep -v Warning $OUT/r/bench_moe.log | head -120
date -u >> $OUT/r/env3.txt
