#!/usr/bin/env bash
# Round 35, call 3 (H100): the peers side by side, 4096x14336 (as call 2), then the DeepSeek seed fp8 kernels of
# ../shared/peers/peers_bench.py (carried in .carry/peers, not part of the project) in another process with
# torchao and gemlite off its path, beside its own bf16 row.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
date -u > $OUT/r/env3.txt
s=4096x14336
timeout 300 python -m quantkit bench layers --no-plot --rounds 3 --no-gpu-time --no-floor --shapes $s \
  --json $OUT/r/peers_$s.json > $OUT/r/peers_$s.log 2>&1
echo "$s rc=$? $(tail -n 1 $OUT/r/peers_$s.log)"
(cd $OUT/r && PYTHONPATH= OUT=$OUT/r timeout 240 python $OLDPWD/.carry/peers/peers_bench.py --no-compile > $OUT/r/seed_peers.log 2>&1)
echo "seed rc=$? rows=$(grep -c ROW $OUT/r/seed_peers.log)"
date -u >> $OUT/r/env3.txt
tar czf $OUT/call3.tgz -C $OUT r
