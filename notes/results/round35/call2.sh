#!/usr/bin/env bash
# Round 35, call 2 (H100): the peers side by side again on today's code (round 28 last measured them): torchao 0.18.0
# and gemlite 0.6.0.post2 from wheels (.whl, git-ignored), timed by `quantkit bench layers` beside the four recipes
# in one process a shape, the same timer and bf16 row (eager, three rounds). This call: 4096x4096 and 14336x4096.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv;
  python -c "import torch, triton, torchao, gemlite; print(torch.__version__, triton.__version__, torchao.__version__, gemlite.__version__)"; } > $OUT/r/env2.txt 2>&1
for s in 4096x4096 14336x4096; do
  timeout 285 python -m quantkit bench layers --no-plot --rounds 3 --no-gpu-time --no-floor --shapes $s \
    --json $OUT/r/peers_$s.json > $OUT/r/peers_$s.log 2>&1
  echo "$s rc=$? $(tail -n 1 $OUT/r/peers_$s.log)"
done
date -u >> $OUT/r/env2.txt
tar czf $OUT/call2.tgz -C $OUT r
