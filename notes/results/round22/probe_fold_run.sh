export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
date -u
timeout 150 python scripts/probe_decode_fold.py > $OUT/fold_correct.log 2>&1; echo rc=$?; tail -4 $OUT/fold_correct.log
A='{"kernel":"decode","MT":4,"WK":4,"WM":1,"DK":128,"SUB":1,"XPF":false'
B='{"kernel":"decode","MT":2,"WK":8,"WM":1,"DK":128,"SUB":1,"XPF":true'
C='{"kernel":"decode","MT":1,"WK":4,"WM":1,"DK":128,"SUB":1,"XPF":true'
D='{"kernel":"decode","MT":2,"WK":2,"WM":1,"DK":128,"SUB":1,"XPF":false,"DIAG":true'
E='{"kernel":"decode","MT":1,"WK":1,"WM":2,"DK":128,"SUB":1,"XPF":true,"DIAG":true'
F=',"FOLD":true}'; S=',"FOLD":true,"FOLD_SHIFT":true}'
python scripts/probe_ab_configs.py int4_weight_only 16 14336x4096 5 "$A$F" "$A$S" "$B$F" '{"kernel":"decode","MT":4,"WK":4,"WM":1,"DK":128,"SUB":1,"XPF":true,"FOLD":true}' '{"kernel":"decode","MT":2,"WK":4,"WM":1,"DK":128,"SUB":1,"XPF":true,"FOLD":true}' 2>&1 | tee $OUT/ab_m16_a.log
python scripts/probe_ab_configs.py int4_weight_only 16 4096x14336 5 "$B$F" "$B$S" "$A$F" 2>&1 | tee $OUT/ab_m16_b.log
python scripts/probe_ab_configs.py int4_weight_only 1 14336x4096 5 "$C$F" "$C$S" "$D$F" 2>&1 | tee $OUT/ab_m1_a.log
python scripts/probe_ab_configs.py int4_weight_only 1 4096x14336 5 "$D$F" "$D$S" "$C$F" 2>&1 | tee $OUT/ab_m1_b.log
python scripts/probe_ab_configs.py int4_weight_only 1 4096x4096 5 "$E$F" "$E$S" 2>&1 | tee $OUT/ab_m1_c.log
python scripts/probe_ab_configs.py int4_weight_only 16 4096x4096 5 "$A$F" "$B$F" '{"kernel":"decode","MT":2,"WK":4,"WM":1,"DK":128,"SUB":1,"XPF":true,"FOLD":true}' 2>&1 | tee $OUT/ab_m16_c.log
date -u
