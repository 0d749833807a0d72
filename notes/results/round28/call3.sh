#!/usr/bin/env bash
# Round 28, call 3 (H100): (a) the peers side by side at 4096x14336 (call 2 ran out of time after two shapes);
# (b) fp8-block 4096² M = 128 / 1024 with GPU time, with and without torchao + gemlite imported (call 2 read
# 0.94x at M = 128, eager only); (c) the DeepSeek seed kernels of ../shared/peers/peers_bench.py (carried in
# .carry/peers, not part of the project), torchao and gemlite hidden from it, beside bf16.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/device.txt 2>&1
A="bench layers --no-plot --recipes fp8-block int8-dynamic --shapes 4096x4096 --m 128,1024 --rounds 5 --no-peers --no-floor"
timeout 60 python -m quantkit $A --json $OUT/m128_plain.json > $OUT/m128_plain.log 2>&1
timeout 60 python -c "import sys, runpy, torchao, gemlite; sys.argv = ['quantkit'] + sys.argv[1:]; runpy.run_module('quantkit', run_name='__main__', alter_sys=True)" $A --json $OUT/m128_imported.json > $OUT/m128_imported.log 2>&1
timeout 270 python -m quantkit bench layers --no-plot --rounds 3 --no-gpu-time --no-floor --shapes 4096x14336 --json $OUT/layers_peers_4096x14336.json > $OUT/layers_peers_4096x14336.log 2>&1
timeout 190 python -c "import sys; sys.modules['torchao'] = None; sys.modules['gemlite'] = None; sys.argv = ['peers_bench.py', '--no-compile']; exec(compile(open('.carry/peers/peers_bench.py').read(), 'peers_bench.py', 'exec'))" > $OUT/seed.log 2>&1
grep -h "fp8-block \|int8-dynamic \|bf16 " $OUT/m128_*.log | cut -c1-150; tail -n 2 $OUT/layers_peers_4096x14336.log; grep -c ROW $OUT/seed.log
