#!/usr/bin/env bash
# Round 33, call 3 (H100): the new defaults. (a) call 1's per-layer bench again on the same shapes (M = 16-2048;
# M = 1 took no new default), (b) the GPU tests of the four families, their Gluon kernels and the tuning module.
# Everything is packed into one archive (a call returns at most 8 files).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/r/env3.txt
SHAPES=2048x2048,512x2048,8192x2048,2048x8192,3584x3584,512x3584,18944x3584,3584x18944,12288x4096,4096x12288
SHAPES=$SHAPES,5120x5120,13824x5120,5120x13824,8192x8192,28672x8192,8192x28672
timeout 300 python -m quantkit bench layers --no-plot --no-peers --no-floor --no-gpu-time --rounds 1 \
  --shapes $SHAPES --m 16,64,256,2048 --json $OUT/r/other_shapes_after.json > $OUT/r/other_shapes_after.log 2>&1
echo "bench rc=$?"
timeout 270 python -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/kernels/test_fp8_block.py \
  tests/kernels/test_int8_dynamic.py tests/kernels/test_int8_weight_only.py tests/kernels/test_int4_weight_only.py \
  tests/kernels/test_f8_gemm_sm90.py tests/kernels/test_i8_gemm_sm90.py tests/kernels/test_tuning.py \
  tests/kernels/test_wo_gemm_sm90.py tests/kernels/test_aq_decode_sm90.py \
  > $OUT/r/gpu_tests_families.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_families.log)"
grep -E "FAILED|Error" $OUT/r/gpu_tests_families.log | head -20
tar czf $OUT/call3.tgz -C $OUT r
