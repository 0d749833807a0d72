# Round 25 on the H100 (2026-11-23, device calls between ~21:21 and ~22:00 UTC; call 11 on an H200): what was run, in order.
# Calls 1-6 ran on the tree of commit 1cf939a plus this round's files (the read-floor instrument for call 6); calls 7-11 on
# 22209f2 plus, from call 10, the table change of the commit that adds this line.
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
# 1. what the L2 flush leaves (l2_flush_state.log), and the int4 / int8 decode kernels with an L2 evict-first
#    policy on their weight loads (l2_flush_state_evict_first.log)
python notes/results/round25/probe_l2_flush_state.py
TRITON_CACHE_DIR=/tmp/tc2 python notes/results/round25/probe_l2_flush_state.py --policy first --only int4,int8wo
# 2. the read floor: 28 read kernels on every byte count the layers stream, do_bench, three alternating rounds
#    (read_floor.log; its "layer" column is each family's kernel function called eagerly, without the layers'
#    launch plans, so host time shows in some cells: the per-layer run of call 6 is the layers' figure)
python scripts/probe_read_floor.py --rounds 3
# 3. split-K for 4096x14336 modelled as the same bytes at 8192x7168 and 16384x3584 (split_equiv_4096x14336.log)
python scripts/probe_split_equivalent.py int4:16:2 int4:1:2 int8w:16:2
# 4. the decode kernel's weight load in other PTX forms, one process a variant, three alternating rounds
#    (decode_load_variants.log)
python notes/results/round25/probe_decode_load_variants.py --all 3
# 5. the GPU tests of the bench package with the floor (final/gpu_tests_bench.log: 2 passed, 1 skipped: no torchao)
python -m pytest -q -p no:cacheprovider -m gpu tests/bench/test_floor.py tests/bench/test_layers.py tests/bench/test_cli.py
# 6. the per-layer run with the read-floor columns (final/bench_layers.{json,md,log})
python -m quantkit bench layers --no-plot --no-peers --rounds 3 --json $OUT/bench_layers.json
# 7. host time of the two-launch layers at M = 128 / 1024 on 4096² (profile_overhead.log, host_breakdown.log):
#    40-58 us a call for fp8-block's layer, spread over the plan replay, the launcher and three TMA descriptors;
#    nothing to take out (the per-layer run's 0.56x at fp8 4096² M = 128 was that machine's slower host)
python scripts/profile_overhead.py --m 128,1024 --profile --profile-m 128,1024 --recipes fp8-block,int8-dynamic,int4-weight-only
python scripts/host_breakdown.py --cells 4096x4096:128,1024
# 8. decode configs the M = 1 / 16 candidate lists do not hold, on the 14336-wide int4 cells: SUB 2 / 4 and x
#    loaded at use (ab_int4_grid.sh: ab_int4_m1_sub.log, ab_int4_m16_more.log)
bash notes/results/round25/ab_int4_grid.sh
# 9. the one that won, MT 1 / WK 4 with x at use at 14336x4096 M = 1: seven alternating rounds alone, then
#    inside the b1 decode step (ab_int4_xpf.sh: ab_int4_m1_xpf.log, step_int4_b1_gate_up_xpf.log)
bash notes/results/round25/ab_int4_xpf.sh
# 10. the int4 GPU tests of the shipped decode-size entries with the new entry (gpu_tests_int4_table.log: 2 passed)
python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_int4_weight_only.py -k "shipped or tuned or decode"
# 11. on an H200, which borrows that entry: both configs, seven alternating rounds (h200/ab_int4_m1_xpf_h200.log)
D='"kernel":"decode","DK":128'
python scripts/probe_ab_configs.py int4_weight_only 1 14336x4096 7 "{$D,\"MT\":1,\"WK\":4,\"WM\":1,\"SUB\":1,\"XPF\":true}" \
  "{$D,\"MT\":1,\"WK\":4,\"WM\":1,\"SUB\":1,\"XPF\":false}"
# 12. every H100 decode entry that prefetches x, against the same config with x at use (ab_xpf_flip.log)
python notes/results/round25/ab_xpf_flip.py
# 13. on an H200: the two entries changed after call 12, both ways, and the int4 decode-size GPU tests
#     (h200/ab_xpf_h200.log: 2 passed)
bash notes/results/round25/ab_xpf_h200.sh
# 14. the 8-bit decode kernel with x codes loaded at use (XPF, new this round) at M = 16, fp8-block and
#     int8-dynamic, shipped entries both ways and two more programs (ab_aq_xpf.sh: ab_aq_xpf.log; its GPU tests at
#     the end: 4 of test_diag_gpu failed with ValueError: round 24's key check rejected the kernel's DG key in both
#     families, fixed in the commit that adds this line)
bash notes/results/round25/ab_aq_xpf.sh
# 15. with the fix and fp8-block's 14336x4096 M = 16 entry on x at use: the kernel's GPU tests (15 passed), fp8-block's
#     (1 passed), and the b16 decode step with the entry and with x a trip ahead (fp8_xpf_checks.log)
bash notes/results/round25/fp8_xpf_checks.sh
# 16. on an H200, which borrows that entry: both ways, five alternating rounds (h200/ab_fp8_xpf_h200.log)
C='"BM":16,"DK":128,"MT":2,"PDL":true,"SUB":1,"WK":2,"WM":2,"fuse_act_quant":false,"kernel":"decode"'
python scripts/probe_ab_configs.py fp8_block 16 14336x4096 5 "{$C}" "{$C,\"XPF\":false}"
# 17. the GPU tests of the five kernel families' files on the final code (final/gpu_tests_kernels.log: 114 passed)
python -m pytest -q -p no:cacheprovider -m gpu -rf tests/kernels/test_wo_decode_sm90.py tests/kernels/test_int8_dynamic.py \
  tests/kernels/test_int4_weight_only.py tests/kernels/test_int8_weight_only.py tests/kernels/test_fp8_block.py
