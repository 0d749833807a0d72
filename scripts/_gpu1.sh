#!/usr/bin/env bash
set -uo pipefail
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
date -u > $OUT/env.txt
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,clocks.max.sm --format=csv >> $OUT/env.txt
timeout 400 python3 -m quantkit bench layers --no-plot --no-peers --rounds 3 --json $OUT/bench_layers.json --out /tmp/bl > $OUT/bench_layers.log 2>&1
cp /tmp/bl/*.md $OUT/ 2>/dev/null
date -u >> $OUT/env.txt
