#!/usr/bin/env bash
# Round 31, call 5 (H100): the whole GPU test suite on the final code and tables, 12 pytest-xdist processes.
set -u
export QUANTKIT_MINILM_DIR=$PWD/.carry/minilm TEST_WORKERS=12 TRITON_CACHE_DIR=/tmp/tc
OUT=$OUT bash scripts/gpu_session.sh env tests
