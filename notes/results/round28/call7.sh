#!/usr/bin/env bash
# Round 28, call 7 (H100): the final tree. (a) the fp8 Gluon GEMM's GPU tests (odd shapes through linear(), whose
# codes and scales now share the output's allocation); (b) the per-layer table of every recipe, three rounds, with
# GPU time, host time and the read floor (eager host costs of the descriptor launches changed this round).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 200 python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_f8_gemm_sm90.py > $OUT/gpu_tests_f8_gemm.log 2>&1
timeout 330 python -m quantkit bench layers --no-plot --no-peers --rounds 3 --json $OUT/bench_layers.json > $OUT/bench_layers.log 2>&1
tail -n 2 $OUT/gpu_tests_f8_gemm.log; sed -n '/### Speedup over bf16/,/^$/p' $OUT/bench_layers.md | head -3; grep -A20 "### Speedup over bf16" $OUT/bench_layers.md | tail -17
