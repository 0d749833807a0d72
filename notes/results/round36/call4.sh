#!/usr/bin/env bash
# Round 36, call 4 (H100): call 3 again after its fix: under torch.func.grad the eager backward calls the input gradient's custom op (the
# Triton kernels cannot read functorch's wrapped tensors; the op's dispatch unwraps them).
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1 QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
mkdir -p $OUT/r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv; } > $OUT/r/env4.txt 2>&1
timeout 300 python -m pytest -q -p no:cacheprovider -m gpu -n 12 -rs tests/layers tests/kernels/test_int8_weight_only.py tests/kernels/test_fp8_block.py tests/kernels/test_int4_weight_only.py -k "layer or gradient or backward or dequant or layouts or cuda" > $OUT/r/gpu_tests_call4.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_call4.log)"
grep -E "^FAILED|^ERROR|^SKIPPED" $OUT/r/gpu_tests_call4.log | head -20
python - <<'PY' 2>&1 | tee $OUT/r/func_grad_gpu4.txt
import torch, quantkit
from torch import nn
for recipe in ("fp8-block", "int8-dynamic", "int8-weight-only", "int4-weight-only"):
    layer = quantkit.quantize_linear(nn.Linear(4096, 1024, dtype=torch.bfloat16, device="cuda"), recipe)
    x = torch.randn(64, 4096, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    layer(x).float().square().sum().backward()
    g = torch.func.grad(lambda t: layer(t).float().square().sum())(x.detach())
    print(recipe, "func.grad equals autograd:", torch.equal(g, x.grad))
PY
date -u >> $OUT/r/env4.txt
