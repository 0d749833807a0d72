#!/usr/bin/env bash
# Round 32, call 1 (H100): the 8-bit decode kernel at M = 17-64 (2-4 x tiles of 16 a weight tile) against the
# shipped entries of fp8-block and int8-dynamic, eager through the planned layer; then the decode kernel's GPU
# tests with the new M > 16 shapes.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/env.txt
python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/env.txt
timeout 150 python -m pytest -q -p no:cacheprovider -m gpu -n 8 --durations=5 tests/kernels/test_aq_decode_sm90.py \
  > $OUT/gpu_tests_decode.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/gpu_tests_decode.log)"
grep -E "FAILED|Error" $OUT/gpu_tests_decode.log | head -20
PROBE_ROUNDS=3 timeout 200 python scripts/probe_eager_configs.py fp8d 32,64 4096x4096 4096x14336 14336x4096 1024x4096 \
  > $OUT/eager_fp8d.log 2>&1
echo "fp8 probe rc=$?"
PROBE_ROUNDS=3 timeout 200 python scripts/probe_eager_configs.py int8d 32,64 4096x4096 4096x14336 14336x4096 1024x4096 \
  > $OUT/eager_int8d.log 2>&1
echo "int8 probe rc=$?"
