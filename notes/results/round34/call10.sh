#!/usr/bin/env bash
# Round 34, call 10 (H100, the machine of call 9): the whole GPU test suite on the final code, alone (call 9's run
# reached its 420 s limit after ~270 tests, none failed).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
date -u > $OUT/r/env10.txt
timeout 570 python -m pytest -q -p no:cacheprovider -m gpu -n 12 --durations=10 > $OUT/r/gpu_tests_final2.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_final2.log)"
grep -E "^FAILED|^ERROR" $OUT/r/gpu_tests_final2.log | head -20
date -u >> $OUT/r/env10.txt
tar czf $OUT/call10.tgz -C $OUT r
