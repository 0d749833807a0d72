# Round 24 on the H100 (2026-11-23, device calls between ~19:10 and ~19:33 UTC): what was run, in order.
# The fused kernel is in commit 170c9f8 (reverted in the commit that adds this file); the diagnostic switches
# of calls 2-4 are fused_diag_hooks.patch on top of it (DIAG bit 1: the quantizer publishes its items without
# quantizing them; bit 2: the load warp does not wait for the flags; bit 4: %globaltimer stamps; XEVICT: an
# eviction policy on the x copies).
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
# 1. GPU tests of the fused config (cut off by a 240 s limit after 19 passed), then the layer A/B:
#    ab_fused.log
G='{"kernel":"gluon","BLOCK_M":128,"BLOCK_N":128,"GROUP_M":8,"fuse_act_quant":false,"num_warps":8,"num_stages":4,"EPI":"tma"}'
F='{"kernel":"gluon","BLOCK_M":128,"BLOCK_N":128,"GROUP_M":8,"fuse_act_quant":true,"num_warps":8,"num_stages":4,"EPI":"tma"}'
for M in 4096 1024; do
  python scripts/probe_ab_configs.py fp8_block $M 4096x4096,14336x4096,4096x14336 5 "$G" "$F"
done
# 2. where the time goes (probe_fused_diag.log): the diagnostic switches, three alternating rounds
python notes/results/round24/probe_fused_diag.py
# 3. when each program's quantizer finishes (probe_fused_timeline.log; the load warp's stamps did not land)
python notes/results/round24/probe_fused_timeline.py
# 4. clocks and power under back-to-back calls (probe_fused_power_eager.log: an earlier version of the script that
#    called the layer eagerly, the host between calls;
#    probe_fused_power_graph.log: 20 calls a CUDA graph, replayed for 2.5 s; power_limits.txt)
python notes/results/round24/probe_fused_power.py
# 5. the fused config's GPU tests on commit 170c9f8 (gpu_tests_fused.log: 26 passed)
python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_f8_gemm_sm90.py -k fused
# 6. on an H200 (h200/): round 23's L2 prefetch hint, each cell's H200 config with L2PF 0 and 128
#    (ab_l2pf_h200.log), then the decode kernel's GPU tests (gpu_tests_decode_h200.log: 20 of 22 passed
#    before the call's 200 s limit, none failed)
for cell in "int4_weight_only 16 14336x4096" "int4_weight_only 1 14336x4096" "int4_weight_only 16 4096x14336" \
            "int8_weight_only 16 14336x4096"; do
  set -- $cell   # the H200's config for the cell from tuning.get_config, as {..., "L2PF": 0} and {..., "L2PF": 128}
  python scripts/probe_ab_configs.py $1 $2 $3 5 "$CFG_L2PF_0" "$CFG_L2PF_128"
done
python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_wo_decode_sm90.py
# 7. after the config-key checks (commit 0e05b6c), on an H100: 15 passed
python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_tuning.py tests/test_tune_cli.py tests/kernels/test_plan.py
