#!/usr/bin/env bash
# Round 36, call 2 (H100): the input gradient's cost against bf16 on the final code (eager autograd as an
# autograd.Function, int8's dequantization through the cached launcher), then the whole GPU test suite.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv;
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"; } > $OUT/r/env2.txt 2>&1
timeout 170 python scripts/bench_backward.py --rounds 3 --out $OUT/r/bench_backward2.md > $OUT/r/bench_backward2.log 2>&1
echo "bench rc=$?"; grep "^|" $OUT/r/bench_backward2.md
timeout 400 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs --durations=5 > $OUT/r/gpu_tests_call2.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call2.log)"
grep -E "^FAILED|^ERROR|^SKIPPED" $OUT/r/gpu_tests_call2.log | head -20
date -u >> $OUT/r/env2.txt
