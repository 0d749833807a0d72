#!/usr/bin/env bash
# Round 38, call 3 (H100): align above 1024 slots in three Triton launches (in place of ~30 torch operations, ~500 µs of
# host time at Qwen3-30B-A3B's 256 tokens in call 2). The MoE GPU tests, scripts/bench_moe.py, the host time at 1 and 256 tokens.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env3.txt 2>&1
timeout 200 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs tests/kernels/test_moe.py tests/layers/test_experts.py > $OUT/r/gpu_tests_moe.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_moe.log)"
grep -E "^FAILED|^ERROR|^E  .*Error|^E   *assert|^E   *Assert" $OUT/r/gpu_tests_moe.log | head -20
timeout 330 python scripts/bench_moe.py --rounds 3 --json $OUT/r/bench_moe.json > $OUT/r/bench_moe.log 2>&1
echo "bench rc=$?"; grep -v Warning $OUT/r/bench_moe.log | head -130
timeout 60 python scripts/probe_moe_host.py --top 8 > $OUT/r/host.log 2>&1; timeout 50 python scripts/probe_moe_host.py --tokens 256 --top 8 > $OUT/r/host256.log 2>&1
echo "host rc=$?"; grep -E "eager" $OUT/r/host.log $OUT/r/host256.log
date -u >> $OUT/r/env3.txt
