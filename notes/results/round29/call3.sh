#!/usr/bin/env bash
# Round 29, call 3 (H100): fp8-block's cuBLAS path, three allocations + functional _scaled_mm (round 28) against
# one block + _scaled_mm(out=...) (now), interleaved in one process (call 2 read 14336x4096 M = 1024 at 1.45x, round
# 28 at 1.52x); then the whole per-layer table on this tree.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 200 python scripts/probe_cublas_out.py --rounds 5 > $OUT/cublas_out.log 2>&1
cat $OUT/cublas_out.log
timeout 330 python -m quantkit bench layers --no-plot --no-peers --rounds 3 --json $OUT/bench_layers.json \
  > $OUT/bench_layers.log 2>&1
grep -A20 "### Speedup over bf16" $OUT/bench_layers.md | tail -17
