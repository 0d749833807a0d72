#!/usr/bin/env bash
# Round 34, call 12 (H100): the M = 8 entries, eagerly. The per-layer bench at M = 8 (and M = 5) of both weight-only
# recipes (and int4 at group 32, whose M = 5-8 configs _fit_group now adapts) on the code before (4825dbd: its tables and int4 module
# in before_m8/, copied into /tmp/old) and after, back to back, three rounds each; then the GPU tests of every shipped entry.
set -u
export TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT/r /tmp/old
# the before side: this tree with the three files of 4825dbd that the change touched (before_m8/)
cp -r quantkit /tmp/old/ && B=notes/results/round34/before_m8
cp $B/int4_weight_only.json $B/int8_weight_only.json /tmp/old/quantkit/kernels/tuned/
cp $B/int4_weight_only.py /tmp/old/quantkit/kernels/
date -u > $OUT/r/env12.txt
A="bench layers --no-plot --no-peers --no-floor --no-gpu-time --rounds 3 --m 5,8"
R="int8-weight-only int4-weight-only int4-weight-only:group_size=32"
S=4096x4096,14336x4096,4096x14336,1024x4096
PYTHONPATH=/tmp/old timeout 150 python -m quantkit $A --recipes $R --shapes $S --json $OUT/r/m8_before.json > $OUT/r/m8_before.log 2>&1
echo "before rc=$?"
PYTHONPATH=$PWD timeout 150 python -m quantkit $A --recipes $R --shapes $S --json $OUT/r/m8_after.json > $OUT/r/m8_after.log 2>&1
echo "after rc=$?"
sed -n '/### Speedup/,/^### /p' $OUT/r/m8_before.md | head -14
sed -n '/### Speedup/,/^### /p' $OUT/r/m8_after.md | head -14
PYTHONPATH=$PWD timeout 200 python -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_tuning.py   -k "every_shipped or off_bucket" > $OUT/r/gpu_tests_tables.log 2>&1
echo "tests rc=$? $(tail -n 1 $OUT/r/gpu_tests_tables.log)"
date -u >> $OUT/r/env12.txt
tar czf $OUT/call12.tgz -C $OUT r
