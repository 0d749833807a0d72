#!/usr/bin/env bash
# Round 28, call 4 (H100): (a) host time a call and launch-plan state of each recipe's layer at 4096², with and
# without torchao + gemlite imported, and a cProfile of fp8-block at M = 128 (call 3: eager 23.9 µs against
# 18.8 of GPU time once they were imported); (b) the DeepSeek seed kernels of ../shared/peers/peers_bench.py
# (carried in .carry/peers), torchao and gemlite hidden from it, beside bf16.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 150 python scripts/probe_host_plans.py --profile fp8-block:4096x4096:128 int8-dynamic:4096x4096:128 > $OUT/host_plain.log 2>&1
timeout 150 python scripts/probe_host_plans.py --import torchao gemlite --profile fp8-block:4096x4096:128 > $OUT/host_imported.log 2>&1
timeout 250 python -c "import sys; sys.modules['torchao'] = None; sys.modules['gemlite'] = None; sys.argv = ['peers_bench.py', '--no-compile']; exec(compile(open('.carry/peers/peers_bench.py').read(), 'peers_bench.py', 'exec'))" > $OUT/seed.log 2>&1
grep -h "host" $OUT/host_*.log | cut -c1-160; grep -c ROW $OUT/seed.log; tail -n 5 $OUT/seed.log
