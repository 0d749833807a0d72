#!/usr/bin/env bash
# Round 34, call 1 (H100): the GPU tests of the changed modules (the sweep's finalist re-timing, fp8-block's gemm()
# fallback rule); the fallback A/B (old swap config against linear()'s GEMM rule) on narrow layers at M = 17-64;
# one sweep problem where round 33 saw a default timed last read 8 % slow (int8 weight-only 3584x18944, M = 2048).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/r/env1.txt
python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/r/env1.txt
date -u >> $OUT/r/env1.txt
timeout 300 python -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_tuning.py tests/test_tune_cli.py \
  tests/kernels/test_fp8_block.py > $OUT/r/gpu_tests.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests.log)"
grep -E "^FAILED|Error" $OUT/r/gpu_tests.log | head -10
timeout 150 python scripts/probe_fp8_gemm_fallback.py 5 17,32,64 512x2048,1024x4096,2048x2048,2048x4096,512x3584 \
  > $OUT/r/fp8_gemm_fallback.log 2>&1
echo "probe rc=$?"; cat $OUT/r/fp8_gemm_fallback.log
timeout 150 python -m quantkit.kernels.tuning --family int8_weight_only --shapes 3584x18944 --m 2048 \
  --out $OUT/r/sweep_retime.json > $OUT/r/sweep_retime.log 2>&1
echo "sweep rc=$?"; tail -n 2 $OUT/r/sweep_retime.log
date -u >> $OUT/r/env1.txt
tar czf $OUT/call1.tgz -C $OUT r
