#!/usr/bin/env bash
# Round 37, call 7 (H100): int4's grouped kernels with x copied once in de-interleaved order (each group's even
# columns, then its odd ones) and h stored that way, against call 5's in-register split. The int4 GPU tests of the
# kernels, then scripts/bench_moe.py for int4 (int8 weight-only beside it).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env7.txt 2>&1
timeout 200 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs tests/kernels/test_moe.py -k "int4" > $OUT/r/gpu_tests_moe_int4.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_moe_int4.log)"
grep -E "^FAILED|^E   *assert|^E   *Assert" $OUT/r/gpu_tests_moe_int4.log | head -20
timeout 250 python scripts/bench_moe.py --rounds 3 --recipes int4-weight-only,int8-weight-only --json $OUT/r/bench_moe_int4.json > $OUT/r/bench_moe_int4.log 2>&1
echo "bench rc=$?"; grep -v Warning $OUT/r/bench_moe_int4.log | grep -v "loop" | head -80
date -u >> $OUT/r/env7.txt
