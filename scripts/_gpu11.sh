#!/usr/bin/env bash
export OUT_TAR=$OUT OUT=/tmp/res PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc
mkdir -p $OUT
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/kernels/test_wo_decode_sm90.py 2>&1 | tee $OUT/gpu_tests_decode_final.log | tail -3
NCU="ncu --clock-control none --section WarpStateStats --section SourceCounters --section MemoryWorkloadAnalysis --section SpeedOfLight --launch-skip 2 --launch-count 1"
$NCU -k regex:_decode_kernel python3 scripts/_ncu_one.py int4 14336 4096 1 '{"kernel": "decode", "MT": 1, "WK": 4, "WM": 1, "DK": 128, "SUB": 1, "XPF": true}' > $OUT/ncu_int4_decode_final.txt 2>&1
$NCU -k regex:_gemv_kernel python3 scripts/_ncu_one.py int8 14336 4096 1 '{"BLOCK_K": 512, "BLOCK_N": 8, "kernel": "gemv", "num_stages": 1, "num_warps": 4}' > $OUT/ncu_int8_gemv_final.txt 2>&1
for f in $OUT/ncu_*final.txt; do echo "== $f"; grep -E "Duration|DRAM Throughput|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth" $f | head -10; grep -B2 -A14 "Warp Stall Sampling" $f | head -40; done
tar czf $OUT_TAR/res.tgz -C /tmp res
