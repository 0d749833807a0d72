#!/usr/bin/env bash
# Round 32, call 14 (H100): the H100 borrowed the H200's new 4096x14336 M = 64 entry (swap split-K 4; 43.6 against the
# Gluon split-K 2 GEMM's 40.6 us in call 10) and now has its own. Check: the eager A/B at that cell (shipped = own
# entry) and the b64 decode step of call 12 again.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
PROBE_ROUNDS=3 timeout 120 python scripts/probe_eager_configs.py fp8s 64 4096x14336 > $OUT/eager_fp8s_m64_down.log 2>&1
echo "probe rc=$?"
timeout 90 python scripts/probe_decode_step_configs.py fp8_b64_round32 --rounds 5 > $OUT/step_fp8_b64_round32_final.log 2>&1
echo "step rc=$? $(tail -n 2 $OUT/step_fp8_b64_round32_final.log | cut -c1-60 | tr '\n' '|')"
