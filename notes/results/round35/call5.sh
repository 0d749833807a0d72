#!/usr/bin/env bash
# Round 35, call 5 (H100): the whole GPU test suite on the final code, with the new GPU test of odd input layouts
# (test_input_layouts_gpu) and the Triton paths now run with their tensors' device current (ops.dispatch); then the
# per-layer bench at decode sizes, three rounds, to see the host time of a call after that change (the "host µs"
# column of the GPU-time table; round 34 call 3 is the before).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env5.txt 2>&1
timeout 420 python -m pytest -q -p no:cacheprovider -m gpu -n 12 --durations=10 > $OUT/r/gpu_tests_final.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_final.log)"
grep -E "^FAILED|^ERROR" $OUT/r/gpu_tests_final.log | head -20
timeout 90 python -m pytest -q -p no:cacheprovider -m gpu -rA tests/layers/test_layers.py -k "input_layouts or second_gpu" \
  > $OUT/r/gpu_tests_layouts.log 2>&1
grep -E "^(PASSED|SKIPPED|FAILED)" $OUT/r/gpu_tests_layouts.log | head
timeout 150 python -m quantkit bench layers --no-plot --no-peers --no-floor --rounds 3 --m 1,16 \
  --json $OUT/r/bench_m1_16.json > $OUT/r/bench_m1_16.log 2>&1
echo "bench rc=$? $(tail -n 1 $OUT/r/bench_m1_16.log)"
date -u >> $OUT/r/env5.txt
tar czf $OUT/call5.tgz -C $OUT r
