#!/usr/bin/env bash
# Round 28, call 2 (H100): the peers side by side. torchao 0.18.0 and gemlite 0.6.0.post2 travel as wheels
# (.whl, git-ignored); `quantkit bench layers` times them beside the four recipes in the same process and
# rounds (eager, PERFORMANCE.md's timer), and the GPU bench tests build every peer (rel. error < 0.15).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/device.txt 2>&1
python -c "import torch, triton, torchao, gemlite; print(torch.__version__, triton.__version__, torchao.__version__, gemlite.__version__)" >> $OUT/device.txt 2>&1
timeout 120 python -m pytest -q -p no:cacheprovider -m gpu tests/bench/test_layers.py > $OUT/gpu_tests_bench.log 2>&1
timeout 420 python -m quantkit bench layers --no-plot --rounds 3 --no-gpu-time --no-floor --json $OUT/layers_peers.json > $OUT/layers_peers.log 2>&1
tail -n 3 $OUT/gpu_tests_bench.log; grep -A40 "fastest peer" $OUT/layers_peers.md | head -30
