#!/usr/bin/env bash
# Round 26, call 4 (H100): the tests that need the real all-MiniLM-L6-v2 (a float16 copy carried as .carry/minilm:
# the machine has no registry), then quantkit's main job on it: the demo and a checkpoint conversion.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT
timeout 330 python -m pytest -q -p no:cacheprovider -m gpu -rfs --durations=5 tests/accuracy tests/checkpoint \
  > $OUT/gpu_tests_models.log 2>&1
echo "pytest rc $?" >> $OUT/gpu_tests_models.log
timeout 120 python -m quantkit demo --model $QUANTKIT_MINILM_DIR > $OUT/demo.log 2>&1; echo "demo rc $?" >> $OUT/demo.log
timeout 60 python -m quantkit convert $QUANTKIT_MINILM_DIR /tmp/minilm-int4 --recipe int4-weight-only --overwrite \
  --no-progress > $OUT/convert.log 2>&1; echo "convert rc $?" >> $OUT/convert.log
