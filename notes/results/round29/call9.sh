#!/usr/bin/env bash
# Round 29, call 9 (H100): call 8 found fp8-block's 2048-token prefill, run eagerly (no CUDA graph), at 84.6-100.2 ms
# against bf16's 52-54 (37.7-38.2 ms with graphs): host-bound. Where the host time goes (the cuBLAS path against
# _scaled_mm alone, bf16 and the Gluon GEMM), every recipe's eager prefill, and fp8-block's eager prefill with
# every M = 2048 cuBLAS entry on the Gluon GEMM with TMA stores (alternating processes, two rounds).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 120 python scripts/probe_cublas_host.py 2048 4096x4096 > $OUT/cublas_host.log 2>&1
head -4 $OUT/cublas_host.log
timeout 260 python -m quantkit bench e2e --no-graph --batches 1 --decode-steps 8 --json $OUT/bench_e2e_eager.json \
  > $OUT/bench_e2e_eager.log 2>&1
grep "^| " $OUT/bench_e2e_eager.md | cut -d'|' -f2-7
G='{"kernel": "gluon", "BLOCK_M": 128, "BLOCK_N": 128, "GROUP_M": 8, "fuse_act_quant": false, "num_warps": 8, "num_stages": 4, "EPI": "tma"}'
ALL=()
for nk in "4096 4096" "14336 4096" "4096 14336" "128256 4096"; do ALL+=(fp8_block 2048 $nk "$G"); done
for r in 1 2; do
  if [ $r = 1 ]; then
    timeout 90 python scripts/probe_e2e_entry.py fp8-block --eager-only >> $OUT/e2e_eager_all_gluon.log 2>&1
    timeout 90 python scripts/probe_e2e_entry.py fp8-block --eager-only "${ALL[@]}" >> $OUT/e2e_eager_all_gluon.log 2>&1
  else
    timeout 90 python scripts/probe_e2e_entry.py fp8-block --eager-only "${ALL[@]}" >> $OUT/e2e_eager_all_gluon.log 2>&1
    timeout 90 python scripts/probe_e2e_entry.py fp8-block --eager-only >> $OUT/e2e_eager_all_gluon.log 2>&1
  fi
done
grep "prefill ms" $OUT/e2e_eager_all_gluon.log | sed 's/-> {.*} |/-> gluon tma |/'
