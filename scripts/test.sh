#!/usr/bin/env bash
# Install what the tests need into .venv and run them: bash scripts/test.sh [pytest arguments]
# Without a GPU the Triton kernels run through Triton's CPU interpreter; `-m gpu` selects the
# tests that need a CUDA GPU (run those on a GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
"$PY" -m pip install -q -e ".[test]"
exec "$PY" -m pytest -q "$@"
