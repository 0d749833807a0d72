#!/usr/bin/env bash
# Round 39, call 12 (H100): int8-dynamic's fit_rows (the warp-specialized 128 x 128 GEMM low in an M bucket): its GPU
# tests, and the probe again (its "table" column is now what the layer runs), the rule's edges included.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $R/env12.txt 2>&1
timeout 200 python -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/kernels/test_int8_dynamic.py tests/kernels/test_i8_gemm_sm90.py tests/kernels/test_plan.py > $R/gpu_tests.log 2>&1
echo "tests rc=$? $(tail -n 1 $R/gpu_tests.log)"
grep -E "^FAILED|^ERROR|^E  .*Error|^E   *assert|^E   *Assert" $R/gpu_tests.log | head -20
timeout 200 python scripts/probe_wo_rows.py --families int8dyn --m 300,384,480,512,530,1100,1300,1331,1400,2100,2600,3000 > $R/rows_int8dyn.log 2>$R/rows_int8dyn.err; echo "rc=$?"; cat $R/rows_int8dyn.log; tail -3 $R/rows_int8dyn.err
date -u >> $R/env12.txt
