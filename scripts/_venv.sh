# Sourced by demo.sh and test.sh: make (or reuse) the virtual environment $VENV with torch in it.
# CPU-only machines get the pinned CPU build CI uses; where a CUDA torch is already installed
# system-wide (a GPU box), the venv sees it instead of downloading another.
VENV=${QUANTKIT_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  if python3 -c "import torch" 2>/dev/null; then
    python3 -m venv --system-site-packages "$VENV"
  else
    python3 -m venv "$VENV"
  fi
fi
PY="$VENV/bin/python"
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install -q "torch==2.13.0"
fi
