# On an H200 (which borrows the H100's int4 entries at 14336x4096, M = 2 and 4): each entry with x prefetched and
# with x at use, five alternating rounds; then the int4 decode-size GPU tests on the tables as shipped
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
D='"kernel":"decode","DK":128,"DIAG":true,"MT":1,"SUB":1'
python scripts/probe_ab_configs.py int4_weight_only 2 14336x4096 5 "{$D,\"WK\":1,\"WM\":2,\"XPF\":true}" "{$D,\"WK\":1,\"WM\":2,\"XPF\":false}"
python scripts/probe_ab_configs.py int4_weight_only 4 14336x4096 5 "{$D,\"WK\":2,\"WM\":1,\"XPF\":true}" "{$D,\"WK\":2,\"WM\":1,\"XPF\":false}"
python -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_int4_weight_only.py -k "shipped or tuned or decode"
