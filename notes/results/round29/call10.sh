#!/usr/bin/env bash
# Round 29, call 10 (H100): blocks from out_with_workspace are rounded to 16 bytes, so a plan rebuilds a dtype view of
# one in a single view op (call 9's profile: the planned cuBLAS layer cost 60.5 host µs a call against 31.9 for
# _scaled_mm alone, 13 as_strided a call). The plan and one-allocation GPU tests, the host probe again, then
# fp8-block's eager 2048-token prefill with the shipped table against every M = 2048 cuBLAS entry on the Gluon GEMM
# with TMA stores, three rounds in alternating order, a process each.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 200 python -m pytest -q -p no:cacheprovider tests/kernels/test_one_allocation.py tests/kernels/test_plan.py \
  > $OUT/gpu_tests_plans2.log 2>&1
tail -n 2 $OUT/gpu_tests_plans2.log
timeout 90 python scripts/probe_cublas_host.py 2048 4096x4096 > $OUT/cublas_host2.log 2>&1
head -4 $OUT/cublas_host2.log
G='{"kernel": "gluon", "BLOCK_M": 128, "BLOCK_N": 128, "GROUP_M": 8, "fuse_act_quant": false, "num_warps": 8, "num_stages": 4, "EPI": "tma"}'
ALL=()
for nk in "4096 4096" "14336 4096" "4096 14336" "128256 4096"; do ALL+=(fp8_block 2048 $nk "$G"); done
for r in 1 2 3; do
  if [ $((r % 2)) = 1 ]; then
    timeout 90 python scripts/probe_e2e_entry.py fp8-block --eager-only >> $OUT/e2e_eager_all_gluon2.log 2>&1
    timeout 90 python scripts/probe_e2e_entry.py fp8-block --eager-only "${ALL[@]}" >> $OUT/e2e_eager_all_gluon2.log 2>&1
  else
    timeout 90 python scripts/probe_e2e_entry.py fp8-block --eager-only "${ALL[@]}" >> $OUT/e2e_eager_all_gluon2.log 2>&1
    timeout 90 python scripts/probe_e2e_entry.py fp8-block --eager-only >> $OUT/e2e_eager_all_gluon2.log 2>&1
  fi
done
grep "prefill ms" $OUT/e2e_eager_all_gluon2.log | sed 's/-> {.*} |/-> gluon tma |/'
