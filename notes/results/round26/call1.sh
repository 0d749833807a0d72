#!/usr/bin/env bash
# Round 26, call 1 (H100): the per-layer table and the end-to-end run on the code of round 25's final commit
# (its four table changes included), then the GPU tests outside the five kernel families' files.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/device.txt
python -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $OUT/device.txt
date -u +%FT%TZ >> $OUT/device.txt
python -m quantkit bench layers --no-plot --no-peers --rounds 3 --json $OUT/bench_layers.json > $OUT/bench_layers.log 2>&1
date -u +%FT%TZ >> $OUT/device.txt
python -m quantkit bench e2e --json $OUT/bench_e2e.json > $OUT/bench_e2e.log 2>&1
date -u +%FT%TZ >> $OUT/device.txt
timeout 300 python -m pytest -q -p no:cacheprovider -m gpu -rf tests/layers tests/checkpoint tests/bench tests/test_api.py \
  tests/test_reference.py tests/test_tune_cli.py tests/kernels/test_aq_decode_sm90.py tests/kernels/test_plan.py \
  tests/kernels/test_launch.py tests/kernels/test_tuning.py tests/kernels/test_small_smem_gpus.py > $OUT/gpu_tests_rest.log 2>&1
echo "pytest rc $?" >> $OUT/gpu_tests_rest.log
date -u +%FT%TZ >> $OUT/device.txt
