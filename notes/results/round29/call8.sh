#!/usr/bin/env bash
# Round 29, call 8 (H100): the fp8-block cells left on cuBLAS that no per-layer cell covers, M = 2048 (the e2e
# prefill's bucket). Eager A/B through the planned layer at M = 2048 on the three shapes, then the 2048-token prefill
# with the shipped table and with 4096² M = 2048 on the Gluon GEMM with TMA stores, CUDA graphs and eager, two rounds
# in alternating order (a process each).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 PROBE_ROUNDS=3
mkdir -p $OUT
timeout 200 python scripts/probe_eager_configs.py fp8 2048 4096x4096 14336x4096 4096x14336 > $OUT/eager_fp8_m2048.log 2>&1
cut -c1-120 $OUT/eager_fp8_m2048.log
G='{"kernel": "gluon", "BLOCK_M": 128, "BLOCK_N": 128, "GROUP_M": 8, "fuse_act_quant": false, "num_warps": 8, "num_stages": 4, "EPI": "tma"}'
for r in 1 2; do
  if [ $r = 1 ]; then
    timeout 100 python scripts/probe_e2e_entry.py fp8-block >> $OUT/e2e_prefill_m2048.log 2>&1
    timeout 100 python scripts/probe_e2e_entry.py fp8-block fp8_block 2048 4096 4096 "$G" >> $OUT/e2e_prefill_m2048.log 2>&1
  else
    timeout 100 python scripts/probe_e2e_entry.py fp8-block fp8_block 2048 4096 4096 "$G" >> $OUT/e2e_prefill_m2048.log 2>&1
    timeout 100 python scripts/probe_e2e_entry.py fp8-block >> $OUT/e2e_prefill_m2048.log 2>&1
  fi
done
cat $OUT/e2e_prefill_m2048.log | grep -v Warning | tail -12
