#!/usr/bin/env bash
# Round 31, call 1 (H100): the whole GPU test suite in one call, 12 pytest-xdist processes.
set -u
export QUANTKIT_MINILM_DIR=$PWD/.carry/minilm PYTEST_ADDOPTS="-v" TEST_WORKERS=12 TRITON_CACHE_DIR=/tmp/tc
python3 -c "import xdist; print('xdist', xdist.__version__)"
nproc
OUT=$OUT bash scripts/gpu_session.sh env tests
