#!/usr/bin/env bash
# Round 28, call 12 (H100): end to end on the final tree (decode b1 / b16 under CUDA graphs, prefill 2048), to check
# the flat descriptor replay end to end (prefill's Gluon GEMMs take it) and record the figures.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 420 python -m quantkit bench e2e --json $OUT/bench_e2e.json > $OUT/bench_e2e.log 2>&1
grep -A12 "^| recipe" $OUT/bench_e2e.md | head -30
