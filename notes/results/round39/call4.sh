#!/usr/bin/env bash
# Round 39, call 4 (H100): where Mixtral-8x7B's 2048-token weight-only experts lose to bf16 (the per-expert loop,
# ~512 rows an expert): kernel times under torch.profiler, and the layers alone at M near 512.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $R/env4.txt 2>&1
timeout 200 python scripts/probe_moe_loop.py > $R/loop.log 2>&1; echo "loop rc=$?"; grep -v Warning $R/loop.log | head -90
timeout 250 python -m quantkit bench layers --recipes int8-weight-only int4-weight-only --shapes 14336x4096,4096x14336 --m 497,512,530,1024 --no-peers --no-floor --no-plot --json $R/layers512.json > $R/layers512.log 2>&1
echo "layers rc=$?"; cat $R/layers512.md 2>/dev/null | head -40
date -u >> $R/env4.txt
