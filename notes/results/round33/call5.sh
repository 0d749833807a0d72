#!/usr/bin/env bash
# Round 33, call 5 (H100): the whole GPU test suite on the final defaults (12 pytest-xdist processes).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/r/env5.txt
python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/r/env5.txt
timeout 540 python -m pytest -q -p no:cacheprovider -m gpu -n 12 --durations=15 > $OUT/r/gpu_tests_final.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_final.log)"
grep -E "FAILED|Error" $OUT/r/gpu_tests_final.log | head -20
tar czf $OUT/call5.tgz -C $OUT r
