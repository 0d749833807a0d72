#!/usr/bin/env bash
# Round 32, call 7 (H200): the decode kernel at M = 17-64 on the Llama-3-8B shapes, where the H200 borrows the
# H100's split-K Gluon entries (its 4096x14336 M = 17 / 32 read 0.93-0.96x of bf16 in round 31), three rounds.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
for fam in fp8d int8d; do
  PROBE_ROUNDS=3 timeout 250 python scripts/probe_eager_configs.py $fam 17,32,64 4096x14336 4096x4096 14336x4096 \
    > $OUT/h200_eager_${fam}_llama.log 2>&1
  echo "$fam rc=$?"
done
