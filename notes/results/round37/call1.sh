#!/usr/bin/env bash
# Round 37, call 1 (H100): fused MoE experts split and quantized. Their GPU test (the Triton kernels through the
# experts loop against the CPU reference), then scripts/bench_moe.py: one block's experts, quantkit's recipes against
# transformers' bf16 eager loop and grouped_mm, at 1 / 16 / 256 / 2048 tokens, Qwen3-30B-A3B and Mixtral-8x7B shapes.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv;
  python -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)"; } > $OUT/r/env1.txt 2>&1
cat $OUT/r/env1.txt
timeout 240 python -m pytest -q -p no:cacheprovider -m gpu -rs tests/layers/test_experts.py > $OUT/r/gpu_tests_experts.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_experts.log)"
grep -E "^FAILED|^ERROR|^E  " $OUT/r/gpu_tests_experts.log | head -20
timeout 300 python scripts/bench_moe.py --rounds 3 --json $OUT/r/bench_moe.json > $OUT/r/bench_moe.log 2>&1
echo "bench rc=$?"; cat $OUT/r/bench_moe.log | grep -v Warning | head -80
date -u >> $OUT/r/env1.txt
