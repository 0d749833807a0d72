# Round 25 on the H100 (2026-11-23, device calls between ~21:21 and ~21:40 UTC): what was run, in order.
# Every call ran on the tree of commit 1cf939a plus this round's files (the read-floor instrument for call 6).
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
