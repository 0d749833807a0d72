#!/usr/bin/env bash
# Round 37, call 8 (H100): launch configs of the grouped MoE kernels where int4 is under bf16 (Qwen3-30B-A3B's block
# at 2048 tokens, 128 rows an expert; Mixtral-8x7B's at 256, 64 rows), timed from CUDA graphs
# (scripts/probe_moe_configs.py), int8 weight-only at Qwen's 256 tokens beside them.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env8.txt 2>&1
timeout 250 python scripts/probe_moe_configs.py int4-weight-only qwen3-30b-a3b 2048 > $OUT/r/probe_int4_qwen_2048.log 2>&1
echo "rc=$?"; cat $OUT/r/probe_int4_qwen_2048.log | grep -v Warning | sort -n | head -8; tail -1 $OUT/r/probe_int4_qwen_2048.log
timeout 200 python scripts/probe_moe_configs.py int4-weight-only mixtral-8x7b 256 > $OUT/r/probe_int4_mixtral_256.log 2>&1
echo "rc=$?"; cat $OUT/r/probe_int4_mixtral_256.log | grep -v Warning | sort -n | head -8; tail -1 $OUT/r/probe_int4_mixtral_256.log
timeout 120 python scripts/probe_moe_configs.py int8-weight-only qwen3-30b-a3b 256 > $OUT/r/probe_int8_qwen_256.log 2>&1
echo "rc=$?"; cat $OUT/r/probe_int8_qwen_256.log | grep -v Warning | sort -n | head -6; tail -1 $OUT/r/probe_int8_qwen_256.log
date -u >> $OUT/r/env8.txt
