#!/usr/bin/env bash
# Round 29, call 1 (H100): the split-K partials of int8 weight-only's mma, int4's mma and fp8-block's swap
# paths, and fp8-block's cuBLAS path (now _scaled_mm(out=...)), live in the output's one allocation. GPU tests:
# one allocation a call on every split-K path and the cuBLAS path (bit-identical to the functional _scaled_mm,
# replayed by a launch plan), the planned layers against the unplanned kernels, CUDA graphs, and each family's
# split-K / cuBLAS tests.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/device.txt
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)" >> $OUT/device.txt
timeout 520 python -m pytest -q -p no:cacheprovider \
  tests/kernels/test_one_allocation.py tests/kernels/test_plan.py \
  "tests/kernels/test_fp8_block.py::test_cublas_config_gpu" tests/kernels/test_fp8_block.py::test_swap_split_k \
  tests/kernels/test_fp8_block.py::test_decode_allocates_only_the_output_gpu \
  tests/kernels/test_aq_decode_sm90.py::test_gemm_sizes_allocate_only_the_output_block_gpu \
  tests/kernels/test_int8_weight_only.py::test_gpu_split_k_under_cuda_graph \
  tests/kernels/test_int8_weight_only.py::test_gpu_every_shipped_config_is_correct \
  tests/kernels/test_int4_weight_only.py::test_mma tests/kernels/test_int4_weight_only.py::test_layer_in_cuda_graph_gpu \
  tests/kernels/test_int4_weight_only.py::test_every_kernel_variant_gpu \
  tests/kernels/test_int8_dynamic.py -k "not every_candidate" > $OUT/gpu_tests_one_allocation.log 2>&1
tail -n 15 $OUT/gpu_tests_one_allocation.log
