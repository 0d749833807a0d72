#!/usr/bin/env bash
# Round 36, call 1 (H100): the layers' GPU tests (the two-GPU kinds are withheld this session, so the device guard's test skips;
# the new input-gradient and compiled-backward tests run), then the input gradient's cost against bf16
# (scripts/bench_backward.py).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv;
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())"; } > $OUT/r/env1.txt 2>&1
cat $OUT/r/env1.txt
timeout 240 python -m pytest -q -p no:cacheprovider -m gpu -n 16 -rs tests/layers/test_layers.py tests/kernels/test_int8_weight_only.py -k "layer or gradient or backward or dequantize or second_gpu or layouts or cuda" > $OUT/r/gpu_tests_layers_call1.log 2>&1
echo "layer tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_layers_call1.log)"
grep -E "^FAILED|^ERROR|SKIPPED" $OUT/r/gpu_tests_layers_call1.log | head -20
timeout 300 python scripts/bench_backward.py --rounds 3 --out $OUT/r/bench_backward.md > $OUT/r/bench_backward.log 2>&1
echo "bench rc=$?"; tail -n 52 $OUT/r/bench_backward.log
date -u >> $OUT/r/env1.txt
