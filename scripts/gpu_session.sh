#!/usr/bin/env bash
# Everything the GPU machine is for, in one call: bash scripts/gpu_session.sh [stage ...]
# Stages: env tests tune bench e2e rounding convert demo (default: all). Results go to $OUT (default ./out).
# The GPU machine has torch/triton/transformers but no registry: quantkit runs from the checkout
# (PYTHONPATH), and the MiniLM model comes from .carry/minilm when the package is absent (made here by
# scripts/carry_minilm.py; carry .carry with the call).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
[ -d .carry/minilm ] && export QUANTKIT_MINILM_DIR=$PWD/.carry/minilm
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
stages=${*:-env tests tune bench e2e rounding convert demo}
t0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - t0 )) s] $*"; }
for stage in $stages; do
  case $stage in
    env)
      stamp env
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/env.txt"
      python3 -c "import torch, triton, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_capability())" | tee -a "$OUT/env.txt" ;;
    tests)
      stamp tests
      # TEST_WORKERS processes (default 8) where pytest-xdist is installed: most of the suite's time is Triton
      # compiling kernels on the CPU, one core a process
      workers=()
      python3 -c "import xdist" 2>/dev/null && [ "${TEST_WORKERS:-8}" -gt 1 ] && workers=(-n "${TEST_WORKERS:-8}")
      python3 -m pytest -m gpu -q -p no:cacheprovider ${workers[@]+"${workers[@]}"} --durations=15 ${TEST_PATHS:-tests} 2>&1 | tee "$OUT/gpu_tests.log" | tail -60 ;;
    tune)
      stamp tune
      for f in ${TUNE_FAMILIES:-fp8_block int8_dynamic int8_weight_only int4_weight_only}; do
        python3 -m quantkit.kernels.tuning --family "$f" --out "$OUT/tuned_$f.json" ${TUNE_ARGS:-} 2>&1 | tee "$OUT/tune_$f.log" | grep -v "^  " | tail -20
        # later stages (bench, e2e) on this machine use what was just tuned
        [ -s "$OUT/tuned_$f.json" ] && python3 -m quantkit.kernels.tuning --install "$OUT/tuned_$f.json"
      done ;;
    bench)
      stamp bench
      python3 -m quantkit bench layers --json "$OUT/bench_layers.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_layers.log" | tail -80 ;;
    e2e)
      stamp e2e
      python3 -m quantkit bench e2e --json "$OUT/bench_e2e.json" ${E2E_ARGS:-} 2>&1 | tee "$OUT/bench_e2e.log" | tail -30 ;;
    rounding)
      stamp rounding
      python3 -m quantkit.rounding.bench --json "$OUT/rounding_bench.json" 2>&1 | tee "$OUT/rounding_bench.log" | tail -20 ;;
    convert)
      stamp convert
      python3 -m quantkit convert "$QUANTKIT_MINILM_DIR" /tmp/minilm-int4 --recipe int4-weight-only --overwrite --no-progress 2>&1 | tee "$OUT/convert.log" | tail -5 ;;
    demo)
      stamp demo
      python3 -m quantkit demo ${QUANTKIT_MINILM_DIR:+--model "$QUANTKIT_MINILM_DIR"} 2>&1 | tee "$OUT/demo.log" | tail -16 ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
stamp done
