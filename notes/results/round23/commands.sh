# Round 23 on the H100 (2026-11-23, 17:3x-17:53 UTC device clock): what was run, in order.
# Each A/B: the shipped config, then the same config without the hint (L2PF 0), with it (128) and, in the
# first two calls, 64 / 256 (removed again after them: 64 and 256 measured no better than 128).
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
P="python scripts/probe_ab_configs.py"
# 1. weight-only decode kernel (ab_l2pf_int4_weight_only.log, ab_l2pf_int8_weight_only.log, r23_run.log),
#    e.g. int4 M = 16 at 14336x4096:
$P int4_weight_only 16 14336x4096 5 \
  '{"kernel":"decode","MT":4,"WK":4,"WM":1,"DK":128,"SUB":1,"XPF":false,"L2PF":0}' \
  '{"kernel":"decode","MT":4,"WK":4,"WM":1,"DK":128,"SUB":1,"XPF":false,"L2PF":128}'
#    (and M = 1 / 16 at the three Llama shapes for both weight formats; see the logs for every config)
python -m pytest -q -m gpu tests/kernels/test_wo_decode_sm90.py        # gpu_tests_decode.log: 21 passed
# 2. the 8-bit activation decode kernel with a byte-wise version of the same load (ab_l2pf_fp8_block.log,
#    ab_l2pf_int8_dynamic.log): within 1 %, not kept
# 3. with the hint the default: sweeps and the per-layer weight-only cells at M = 1 / 16
python -m quantkit.kernels.tuning --family int4_weight_only --m 1,16 --out tune_int4_m1_16.json
python -m quantkit.kernels.tuning --family int8_weight_only --m 1,16 --out tune_int8wo_m1_16.json
python -m quantkit bench layers --no-plot --no-peers --rounds 3 --m 1,16 \
  --recipes int4-weight-only int8-weight-only --json bench_m1_16.json
#    GPU tests in that call: test_edges_gpu failed with a misaligned address (int4 DK = 64: 8-byte runs
#    loaded as 16-byte vectors; gpu_tests_first_try_dk64_misaligned.log). Fixed (v2 loads for 8-byte runs)
#    and the CPU compile check now checks the vector width.
# 4. after the fix: GPU tests, then bench e2e with the hint off / on / off / on (e2e/, e2e_ab.py)
python -m pytest -q -m gpu tests/kernels/test_wo_decode_sm90.py \
  "tests/kernels/test_int4_weight_only.py::test_gpu_shipped_decode_size_configs_are_correct"
#    -> 23 passed, 20 deselected in 235.14s
for r in off on off on; do
  python notes/results/round23/e2e_ab.py $r --recipes int4-weight-only int8-weight-only --batches 1,16 --no-plot \
    --json e2e/e2e_$r.json
done
# 5. the 16-row tiled layout on top of the hint (probe_tiled_grid_with_hint.log; the probe's grid mode now skips
#    DIAG configs, which the grid gained after round 14)
python scripts/probe_tiled_decode.py grid
# 6. every shipped int4 / int8 weight-only entry of the H100 tables against the reference, with the hint on
python -m pytest -q -m gpu tests/kernels/test_tuning.py -k "every_shipped_entry and weight_only"   # 2 passed
