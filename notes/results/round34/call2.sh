#!/usr/bin/env bash
# Round 34, call 2 (H100): the Gluon GEMMs launched with PDL request their first ring-full of weight tiles before the
# grid wait (WEIGHT_FIRST). GPU tests of both Gluon GEMMs and both 8-bit families (PDL, CUDA graphs, split-K,
# launch plans); then the A/B of weight first against wait first on every PDL cell of the tables and, with PDL
# switched on, on the large-M cells whose entries have it off.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/r/env2.txt
date -u >> $OUT/r/env2.txt
timeout 330 python -m pytest -q -p no:cacheprovider -m gpu -n 10 tests/kernels/test_f8_gemm_sm90.py \
  tests/kernels/test_i8_gemm_sm90.py tests/kernels/test_fp8_block.py tests/kernels/test_int8_dynamic.py \
  tests/kernels/test_plan.py > $OUT/r/gpu_tests_wf.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_wf.log)"
grep -E "^FAILED|Error|Timeout" $OUT/r/gpu_tests_wf.log | head -10
F=fp8_block; I=int8_dynamic
timeout 230 python scripts/probe_weight_first.py 7 $F:64:4096x4096 $F:64:4096x14336 $F:128:4096x4096 \
  $F:128:14336x4096 $F:128:4096x14336 $F:256:4096x14336 $F:1024:4096x4096 $F:1024:4096x14336:pdl \
  $F:4096:4096x4096:pdl $I:64:14336x4096 $I:128:4096x4096 $I:128:14336x4096 $I:128:4096x14336 $I:2048:4096x4096 \
  $I:1024:4096x4096:pdl $I:4096:4096x4096:pdl $I:1024:14336x4096:pdl > $OUT/r/weight_first.log 2>&1
echo "probe rc=$?"; cat $OUT/r/weight_first.log | cut -c1-200
date -u >> $OUT/r/env2.txt
tar czf $OUT/call2.tgz -C $OUT r
