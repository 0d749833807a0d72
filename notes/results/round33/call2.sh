#!/usr/bin/env bash
# Round 33, call 2 (H100): where call 1's defaults lose, (a) the per-layer bench with each row's CUDA-graph GPU time
# and host time on the narrow shapes (host or GPU?), (b) each family's candidates swept on the losing shapes, with
# the bf16 F.linear's GPU time beside them (the sweep's new dense_ms).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 50 python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_tuning.py -k sweep > $OUT/gpu_test_sweep.log 2>&1; echo "test rc=$? $(tail -n1 $OUT/gpu_test_sweep.log)"
timeout 130 python -m quantkit bench layers --no-plot --no-peers --no-floor --rounds 1 \
  --shapes 512x2048,2048x2048,512x3584 --m 16,64,256,2048 --json $OUT/narrow_gpu_time.json > $OUT/narrow_gpu_time.log 2>&1
echo "bench rc=$?"
S8=512x2048,2048x2048,2048x8192,3584x3584,3584x18944,5120x13824
SW=512x2048,2048x2048,8192x2048,5120x5120,3584x18944
timeout 100 python -m quantkit.kernels.tuning --family fp8_block --shapes $S8 --m 16,64,256,2048 \
  --out $OUT/sweep_fp8.json > $OUT/sweep_fp8.log 2>&1; echo "fp8 rc=$?"
timeout 100 python -m quantkit.kernels.tuning --family int8_dynamic --shapes $S8 --m 16,64,256,2048 \
  --out $OUT/sweep_int8d.json > $OUT/sweep_int8d.log 2>&1; echo "int8d rc=$?"
timeout 100 python -m quantkit.kernels.tuning --family int8_weight_only --shapes $SW --m 64,256,2048,4096 \
  --out $OUT/sweep_int8wo.json > $OUT/sweep_int8wo.log 2>&1; echo "int8wo rc=$?"
timeout 100 python -m quantkit.kernels.tuning --family int4_weight_only --shapes $SW --m 64,256,2048,4096 \
  --out $OUT/sweep_int4.json > $OUT/sweep_int4.log 2>&1; echo "int4 rc=$?"
grep -h "best" $OUT/sweep_*.log | cut -c1-400
