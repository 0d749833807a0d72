#!/usr/bin/env bash
# Round 39, call 7 (H100): 128-row tiles between the tuned buckets (wo_gemm_sm90.fit_rows). The weight-only GPU
# tests, the probe again (its "table" column is now what the layers run), Mixtral-8x7B's block.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $R/env7.txt 2>&1
timeout 250 python -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/kernels/test_wo_gemm_sm90.py tests/kernels/test_int8_weight_only.py tests/kernels/test_int4_weight_only.py tests/kernels/test_moe.py > $R/gpu_tests.log 2>&1
echo "tests rc=$? $(tail -n 1 $R/gpu_tests.log)"
grep -E "^FAILED|^ERROR|^E  .*Error|^E   *assert|^E   *Assert" $R/gpu_tests.log | head -20
timeout 200 python scripts/probe_wo_rows.py --m 300,530,600,700,1100,1300 > $R/rows.log 2>$R/rows.err; echo "rows rc=$?"; cat $R/rows.log
timeout 120 python scripts/bench_moe.py --shapes mixtral-8x7b --tokens 256,2048 --recipes int8-weight-only,int4-weight-only --rounds 3 > $R/bench_moe.log 2>&1
echo "bench rc=$?"; grep -v Warning $R/bench_moe.log | head -40
date -u >> $R/env7.txt
