export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D='"kernel":"decode","DK":128'
python scripts/probe_ab_configs.py int4_weight_only 1 14336x4096 7 "{$D,\"MT\":1,\"WK\":4,\"WM\":1,\"SUB\":1,\"XPF\":false}" 2>&1 | grep -v Warn | tee $OUT/ab_int4_m1_xpf.log
python scripts/probe_decode_step_configs.py int4_b1_gate_up_xpf --rounds 5 2>&1 | grep -v Warn | tail -8 | tee $OUT/step_int4_b1_gate_up_xpf.log
