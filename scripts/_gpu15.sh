#!/usr/bin/env bash
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=$OUT
for f in fp8_block int8_dynamic; do
  timeout 150 python3 -m quantkit.kernels.tuning --family $f --out $R/tuned_m2048_$f.json --m 2048 --shapes 4096x4096,14336x4096,4096x14336,1024x4096,128256x4096 > $R/tune_m2048_$f.log 2>&1
  grep -v "^  " $R/tune_m2048_$f.log | tail -5
done
for f in int8_weight_only int4_weight_only; do
  timeout 90 python3 -m quantkit.kernels.tuning --family $f --out $R/tuned_m2048_$f.json --m 2048 --shapes 1024x4096,128256x4096 > $R/tune_m2048_$f.log 2>&1
  grep -v "^  " $R/tune_m2048_$f.log | tail -3
done
timeout 150 python3 -m quantkit bench e2e --json $R/e2e_before_m2048.json --no-plot > $R/e2e_before_m2048.log 2>&1
grep -E "^\| (bf16|fp8|int8|int4)" $R/e2e_before_m2048.md
for f in $R/tuned_m2048_*.json; do python3 -m quantkit.kernels.tuning --install $f; done
timeout 150 python3 -m quantkit bench e2e --json $R/e2e_after_m2048.json --no-plot > $R/e2e_after_m2048.log 2>&1
grep -E "^\| (bf16|fp8|int8|int4)" $R/e2e_after_m2048.md
