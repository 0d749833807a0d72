# fp8-block 14336x4096 M = 16 with x at use (the H100 table's entry since this call): the 8-bit decode kernel's
# and fp8-block's GPU tests, then the b16 decode step with the entry and with x a trip ahead, five rounds
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_aq_decode_sm90.py 2>&1 | tail -3
python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_fp8_block.py -k "shipped or decode or table" 2>&1 | tail -3
python scripts/probe_decode_step_configs.py fp8_b16_gate_up_xpf --rounds 5 2>&1 | grep -v Warn | tail -4
