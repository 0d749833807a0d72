#!/usr/bin/env bash
# Round 29, call 4 (H100): call 3's table read fp8-block 4096² M = 4096 at 0.77x eager (rounds 260 / 156 / 244 µs)
# against 137 µs from the CUDA graph, host 155 µs a call: cuBLAS's _scaled_mm again costing the host more than the
# L2 flush hides. Eager A/B through the planned layer, cuBLAS against the Gluon GEMM variants, at every cuBLAS
# cell of the benchmark (M = 1024 / 4096), three alternating rounds.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 PROBE_ROUNDS=3
mkdir -p $OUT
timeout 540 python scripts/probe_eager_configs.py fp8 1024,4096 4096x4096 14336x4096 4096x14336 \
  > $OUT/eager_fp8_large.log 2>&1
cat $OUT/eager_fp8_large.log | cut -c1-150
