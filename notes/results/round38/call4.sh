#!/usr/bin/env bash
# Round 38, call 4 (H100): align's chunk offsets in their own buffer (call 3: with fewer experts than threads, one
# warp's store of an offset over a count could overtake another warp's load of it; 22 MoE GPU tests failed).
# scripts/bench_moe.py, then the whole GPU suite on the final kernels.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env4.txt 2>&1
timeout 200 python scripts/bench_moe.py --rounds 3 --json $OUT/r/bench_moe.json > $OUT/r/bench_moe.log 2>&1
echo "bench rc=$?"; grep -v Warning $OUT/r/bench_moe.log | head -130
timeout 370 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs --durations=5 > $OUT/r/gpu_tests_call4.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call4.log)"
grep -E "^FAILED|^ERROR|^SKIPPED" $OUT/r/gpu_tests_call4.log | head -20
date -u >> $OUT/r/env4.txt
