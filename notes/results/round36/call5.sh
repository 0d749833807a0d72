#!/usr/bin/env bash
# Round 36, call 5 (H100): the whole GPU test suite on the final code (tuned configs per current GPU, convert's
# sub-folder weights, GPTQ's fallback for unreached layers, the input gradient), then the per-layer table of
# every recipe at 4096² (M = 1, 16, 4096; two rounds) as a check that the forward is where round 35 left it.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env5.txt 2>&1
timeout 400 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs --durations=5 > $OUT/r/gpu_tests_call5.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call5.log)"
grep -E "^FAILED|^ERROR|^SKIPPED" $OUT/r/gpu_tests_call5.log | head -20
timeout 150 python -m quantkit bench layers --no-plot --rounds 2 --no-peers --no-floor --shapes 4096x4096 --m 1,16,4096 \
  --json $OUT/r/bench_layers_call5.json > $OUT/r/bench_layers_call5.log 2>&1
echo "bench rc=$?"; grep -E "^\|" $OUT/r/bench_layers_call5.log | head -30
date -u >> $OUT/r/env5.txt
