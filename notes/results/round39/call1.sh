#!/usr/bin/env bash
# Round 39, call 1 (H100): launch plans for the MoE experts (three per-call inputs, a combine kernel in place of
# sum + cast). The MoE and plan GPU tests, then host time per eager block call with plans off and on.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
R=$OUT/r; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv;
  python -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)"; } > $R/env1.txt 2>&1
timeout 240 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs tests/kernels/test_moe.py tests/kernels/test_plan.py tests/layers/test_experts.py > $R/gpu_tests.log 2>&1
echo "tests rc=$? $(tail -n 1 $R/gpu_tests.log)"
grep -E "^FAILED|^ERROR|^E  .*Error|^E   *assert|^E   *Assert" $R/gpu_tests.log | head -20
for cell in "qwen3-30b-a3b 1" "mixtral-8x7b 1" "qwen3-30b-a3b 16" "qwen3-30b-a3b 256"; do
  set -- $cell
  QUANTKIT_LAUNCH_PLANS=0 timeout 70 python scripts/probe_moe_host.py --shape $1 --tokens $2 --top 6 > $R/host_off_$1_$2.log 2>&1
  timeout 70 python scripts/probe_moe_host.py --shape $1 --tokens $2 --top 6 > $R/host_on_$1_$2.log 2>&1
  echo "== $1 T=$2"; grep -h -E "eager" $R/host_off_$1_$2.log | sed 's/^/off /'; grep -h -E "eager" $R/host_on_$1_$2.log | sed 's/^/on  /'
done
date -u >> $R/env1.txt
