#!/usr/bin/env bash
# Round 33, call 4 (H100): the rules call 3's single-round bench left open, eager A/B through the planned layer
# (three alternating rounds; None = the new default, on shapes no table holds): the weight-only tiles at M = 256,
# fp8-block's cuBLAS against its Gluon GEMM at M = 2048, int8-dynamic's new M = 64 GEMM against the old defaults.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
P="timeout 150 python scripts/probe_eager_configs.py"
PROBE_ROUNDS=3 $P wo8m 256 2048x8192 8192x8192 12288x4096 5120x5120 8192x2048 3584x18944 > $OUT/r/eager_wo8m.log 2>&1
echo "wo8m rc=$?"
PROBE_ROUNDS=3 $P int4m 256 2048x8192 8192x8192 12288x4096 5120x5120 8192x2048 3584x18944 > $OUT/r/eager_int4m.log 2>&1
echo "int4m rc=$?"
PROBE_ROUNDS=3 $P fp8l 2048 3584x3584 5120x5120 8192x2048 2048x8192 4096x12288 5120x13824 > $OUT/r/eager_fp8l.log 2>&1
echo "fp8l rc=$?"
PROBE_ROUNDS=3 $P int8m 64 8192x2048 8192x8192 5120x5120 3584x3584 2048x8192 > $OUT/r/eager_int8m.log 2>&1
echo "int8m rc=$?"
tar czf $OUT/call4.tgz -C $OUT r
