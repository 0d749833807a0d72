#!/usr/bin/env bash
# Round 36, call 7 (H100): the ops defined with torch.library.Library instead of torch.library.custom_op:
# their host cost again (scripts/probe_op_overhead.py, as call 6), then the whole GPU test suite.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env7.txt 2>&1
python scripts/probe_op_overhead.py > $OUT/r/probe_op_overhead7.log 2>&1; grep "µs" $OUT/r/probe_op_overhead7.log
python scripts/probe_train_step.py > $OUT/r/probe_train_step7.log 2>&1; grep "µs" $OUT/r/probe_train_step7.log
timeout 420 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs --durations=5 > $OUT/r/gpu_tests_call7.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call7.log)"
grep -E "^FAILED|^ERROR|^SKIPPED" $OUT/r/gpu_tests_call7.log | head -20
date -u >> $OUT/r/env7.txt
