#!/usr/bin/env bash
# Round 35, call 6 (H100): the GPU tests of the layers, the accuracy comparison and fp8-block after the last
# commits (the layers' forward takes nn.Linear's `input` keyword; compare's hooks take keyword arguments;
# fp8-block re-raises an out-of-memory from cuBLAS).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
date -u > $OUT/r/env6.txt
timeout 330 python -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/layers tests/accuracy tests/kernels/test_fp8_block.py \
  tests/test_api.py > $OUT/r/gpu_tests_call6.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call6.log)"
grep -E "^FAILED|^ERROR" $OUT/r/gpu_tests_call6.log | head -20
date -u >> $OUT/r/env6.txt
tar czf $OUT/call6.tgz -C $OUT r
