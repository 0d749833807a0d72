#!/usr/bin/env bash
# Round 33, call 1 (H100): what a user of another model gets. Per-layer eager bench of every recipe against bf16 on
# shapes of models other than Llama-3-8B (no shipped table entry there, so each layer runs its family's
# default_config): Llama-3.2-1B, Qwen2.5-7B, Qwen3-8B, Qwen2.5-14B, Llama-3-70B; M = 1, 16, 64, 256, 2048.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/env.txt
python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/env.txt
SHAPES=2048x2048,512x2048,8192x2048,2048x8192,3584x3584,512x3584,18944x3584,3584x18944,12288x4096,4096x12288
SHAPES=$SHAPES,5120x5120,13824x5120,5120x13824,8192x8192,28672x8192,8192x28672
timeout 560 python -m quantkit bench layers --no-plot --no-peers --no-floor --no-gpu-time --rounds 1 \
  --shapes $SHAPES --m 1,16,64,256,2048 --json $OUT/other_shapes.json > $OUT/other_shapes.log 2>&1
echo "bench rc=$?"
tail -n 3 $OUT/other_shapes.log
