#!/usr/bin/env bash
# Round 28, call 5 (H100): the DeepSeek-V3 seed kernels (act_quant + fp8_gemm) of ../shared/peers/peers_bench.py,
# carried in .carry/peers (not part of the project), beside bf16 in the same process. torchao and gemlite are not
# installed in this call, so the script skips them.
set -u
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/device.txt 2>&1
cd $OUT && timeout 500 python $OLDPWD/.carry/peers/peers_bench.py --no-compile > $OUT/seed.log 2>&1
grep -c ROW $OUT/seed.log; grep -E "^(bf16|seed)" $OUT/seed.log | cut -c1-120
