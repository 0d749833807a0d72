#!/usr/bin/env bash
# Round 34, call 8 (H100): the int4 Gluon GEMM with several groups a K step (groups of 16 / 32 no longer cut its
# 64- or 128-deep step: per row and group a zero-point and scale, viewed over the fragment's group columns).
# Its GPU tests (every candidate at groups 16-256, odd shapes, stream-K, CUDA graphs), then the candidates at
# groups 32 / 64 (call 5's probe: the Gluon GEMM now runs whole steps) at M = 128 / 1024 / 4096.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
date -u > $OUT/r/env8.txt
timeout 300 python -m pytest -q -p no:cacheprovider -m gpu -n 10 tests/kernels/test_wo_gemm_sm90.py \
  tests/kernels/test_int4_weight_only.py > $OUT/r/gpu_tests_gps.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_gps.log)"
grep -E "^FAILED|Error" $OUT/r/gpu_tests_gps.log | head -10
timeout 240 python scripts/probe_int4_groups.py 3 32,64 128,1024 4096x4096,14336x4096,4096x14336 \
  > $OUT/r/int4_groups_probe_gps.log 2>&1
echo "probe rc=$?"
timeout 60 python scripts/probe_int4_groups.py 3 32 4096 4096x4096 > $OUT/r/int4_groups_probe_gps_m4096.log 2>&1
grep -h -A3 "^g" $OUT/r/int4_groups_probe_gps.log $OUT/r/int4_groups_probe_gps_m4096.log | grep -v ValueError | cut -c1-200
date -u >> $OUT/r/env8.txt
tar czf $OUT/call8.tgz -C $OUT r
