#!/usr/bin/env bash
# Round 35, call 1 (H100): the whole GPU test suite on this round's code (API, checkpoint, CLI and output-file
# changes; no kernel or table changed), then the peers' GPU bench test with torchao and gemlite installed.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env1.txt 2>&1
timeout 540 python -m pytest -q -p no:cacheprovider -m gpu -n 12 --durations=10 > $OUT/r/gpu_tests.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests.log)"
grep -E "^FAILED|^ERROR" $OUT/r/gpu_tests.log | head -20
date -u >> $OUT/r/env1.txt
tar czf $OUT/call1.tgz -C $OUT r
