# The 8-bit decode kernel with x codes loaded at use (XPF false) at M = 16: each shipped entry and the same with
# x at use, plus two more programs with x at use, five alternating rounds, GPU us; then the kernel's GPU tests
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
for fam in fp8_block int8_dynamic; do
  for shape in 4096x4096 14336x4096 4096x14336; do
    mapfile -t CFGS < <(python - "$fam" "$shape" <<'PY'
import json, sys, importlib
from quantkit.kernels import tuning
fam, shape = sys.argv[1], sys.argv[2]
n, k = map(int, shape.split("x"))
mod = importlib.import_module(f"quantkit.kernels.{fam}")
ship = dict(tuning.get_config(fam, 16, n, k, module=mod))
out = [dict(ship, XPF=False), dict(mod._decode(1, 4, dk=128), XPF=False), dict(mod._decode(2, 2, wm=2, dk=128), XPF=False)]
for c in out:
    mod.check_config_entry(c)
    print(json.dumps(c))
PY
)
    python scripts/probe_ab_configs.py $fam 16 $shape 5 "${CFGS[@]}" 2>&1 | grep -v Warn
  done
done
python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_aq_decode_sm90.py 2>&1 | tail -3
