#!/usr/bin/env bash
# Round 38, call 1 (H100): the experts as one operator (torch.compile fullgraph, CUDA graphs), int4's grouped
# kernels on the converted weight (one dot a step); GPU tests, the int4 kernels before / after with a config grid,
# and the eager block call's host time.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env1.txt 2>&1
timeout 250 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs tests/kernels/test_moe.py tests/layers/test_experts.py > $OUT/r/gpu_tests.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests.log)"
grep -E "^FAILED|^ERROR|^E  .*Error|^E   *assert|^E   *Assert" $OUT/r/gpu_tests.log | head -30
timeout 80 python scripts/probe_moe_int4.py notes/results/round38/moe_before.py > $OUT/r/int4_ab.log 2>&1
echo "ab rc=$?"; cat $OUT/r/int4_ab.log
timeout 150 python scripts/probe_moe_int4.py notes/results/round38/moe_before.py --grid --rounds 3 --cells qwen3-30b-a3b:2048,mixtral-8x7b:256,mixtral-8x7b:2048,qwen3-30b-a3b:256 > $OUT/r/int4_grid.log 2>&1
echo "grid rc=$?"; grep -v "^  .*µs (" $OUT/r/int4_grid.log | head -40
timeout 60 python scripts/probe_moe_host.py --top 14 > $OUT/r/host.log 2>&1
echo "host rc=$?"; grep -E "eager|ncalls|^ +[0-9]" $OUT/r/host.log | head -80
date -u >> $OUT/r/env1.txt
