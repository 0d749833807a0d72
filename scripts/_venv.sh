# Sourced by demo.sh and test.sh: make (or reuse) the virtual environment $VENV with torch in it.
# CPU-only machines get the pinned CPU build CI uses; where a CUDA torch is already installed
# system-wide (a GPU box), the venv sees it instead of downloading another.
VENV=${QUANTKIT_VENV:-.venv}
# torch as new as pyproject.toml asks ("torch>=2.4"): an older one would make `pip install -e .` fetch an unpinned
# torch, a multi-GB CUDA build
TORCH_OK='import sys, torch; sys.exit(tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 4))'
# A venv left half-made (no pip: python3-venv missing when it was created; an interrupted first run) is made again
if [ -e "$VENV" ] && [ -n "$(ls -A "$VENV" 2>/dev/null)" ] && ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
  if [ ! -f "$VENV/pyvenv.cfg" ]; then  # not a venv: nothing of the user's is removed
    echo "$VENV exists and is not a virtual environment; move it or set QUANTKIT_VENV to another path" >&2
    exit 1
  fi
  echo "$VENV: a virtual environment without a working python or pip; making it again" >&2
  rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
  if python3 -c "$TORCH_OK" 2>/dev/null; then
    python3 -m venv --system-site-packages "$VENV"
  else
    python3 -m venv "$VENV"
  fi
fi
PY="$VENV/bin/python"
if ! "$PY" -c "$TORCH_OK" 2>/dev/null; then
  "$PY" -m pip install -q "torch==2.13.0"
fi
