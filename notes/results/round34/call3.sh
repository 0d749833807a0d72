#!/usr/bin/env bash
# Round 34, call 3 (H100): the tuning CLI's GPU tests after the summary's fix; then the issues' cells on the final
# code (per layer, every recipe, five rounds; no kernel or table changed since round 31's run) and end to end.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/r/env3.txt
python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/r/env3.txt
date -u >> $OUT/r/env3.txt
timeout 200 python -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_tuning.py tests/test_tune_cli.py \
  > $OUT/r/gpu_tests_tune.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_tune.log)"
grep -E "^FAILED|Error" $OUT/r/gpu_tests_tune.log | head -10
timeout 200 python -m quantkit bench layers --no-plot --no-peers --rounds 5 --json $OUT/r/bench_layers_r5.json \
  > $OUT/r/bench_layers_r5.log 2>&1
echo "layers rc=$?"
timeout 200 python -m quantkit bench e2e --json $OUT/r/bench_e2e.json > $OUT/r/bench_e2e.log 2>&1
echo "e2e rc=$?"
cp out/*.md $OUT/r/ 2>/dev/null
date -u >> $OUT/r/env3.txt
tar czf $OUT/call3.tgz -C $OUT r
