export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D='"kernel":"decode","DK":128'
python scripts/probe_ab_configs.py int4_weight_only 1 14336x4096,4096x14336 3 \
 "{$D,\"MT\":1,\"WK\":4,\"WM\":1,\"SUB\":2,\"XPF\":false}" \
 "{$D,\"MT\":1,\"WK\":4,\"WM\":1,\"SUB\":4,\"XPF\":false}" \
 "{$D,\"MT\":1,\"WK\":2,\"WM\":1,\"SUB\":4,\"XPF\":false}" \
 "{$D,\"MT\":1,\"WK\":8,\"WM\":1,\"SUB\":2,\"XPF\":false}" \
 "{$D,\"MT\":1,\"WK\":2,\"WM\":1,\"SUB\":2,\"XPF\":false}" \
 "{$D,\"MT\":1,\"WK\":4,\"WM\":1,\"SUB\":1,\"XPF\":false}" \
 "{$D,\"MT\":1,\"WK\":2,\"WM\":2,\"SUB\":2,\"XPF\":false}" 2>&1 | grep -v Warn | tee $OUT/ab_int4_m1_sub.log
python scripts/probe_ab_configs.py int4_weight_only 16 14336x4096,4096x14336 3 \
 "{$D,\"MT\":2,\"WK\":4,\"WM\":2,\"SUB\":1,\"XPF\":false}" \
 "{$D,\"MT\":4,\"WK\":2,\"WM\":1,\"SUB\":1,\"XPF\":false}" \
 "{$D,\"MT\":2,\"WK\":8,\"WM\":1,\"SUB\":1,\"XPF\":false}" \
 "{$D,\"MT\":1,\"WK\":8,\"WM\":2,\"SUB\":1,\"XPF\":false}" \
 "{$D,\"MT\":2,\"WK\":4,\"WM\":1,\"SUB\":2,\"XPF\":false}" 2>&1 | grep -v Warn | tee $OUT/ab_int4_m16_more.log
