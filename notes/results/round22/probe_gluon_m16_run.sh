export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader; date -u
G1='{"kernel":"tma_wgmma","BLOCK_M":64,"BLOCK_N":64,"BLOCK_K":128,"GROUP_M":8,"num_warps":4,"num_stages":4,"PERSISTENT":true,"STREAM_K":true}'
G2='{"kernel":"tma_wgmma","BLOCK_M":64,"BLOCK_N":64,"BLOCK_K":128,"GROUP_M":8,"num_warps":4,"num_stages":6,"PERSISTENT":true,"STREAM_K":true}'
G3='{"kernel":"tma_wgmma","BLOCK_M":16,"BLOCK_N":64,"BLOCK_K":128,"GROUP_M":8,"num_warps":4,"num_stages":6}'
G4='{"kernel":"tma_wgmma","BLOCK_M":64,"BLOCK_N":64,"BLOCK_K":64,"GROUP_M":8,"num_warps":4,"num_stages":8,"PERSISTENT":true,"STREAM_K":true}'
for fam in int4_weight_only int8_weight_only; do
  python scripts/probe_ab_configs.py $fam 16 4096x4096,4096x14336,14336x4096 3 "$G1" "$G2" "$G3" "$G4" 2>&1 | tee $OUT/ab_${fam}_m16_gluon.log
done
date -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
date -u
c() { echo "{\"kernel\":\"tma_wgmma\",\"BLOCK_M\":16,\"BLOCK_N\":$1,\"BLOCK_K\":$2,\"GROUP_M\":8,\"num_warps\":$3,\"num_stages\":$4}"; }
python scripts/probe_ab_configs.py int4_weight_only 16 14336x4096 3 "$(c 64 128 4 6)" "$(c 64 128 4 8)" "$(c 64 128 4 10)" "$(c 64 128 4 12)" "$(c 128 128 8 4)" "$(c 128 128 8 6)" "$(c 64 64 4 8)" "$(c 64 64 4 12)" 2>&1 | tee $OUT/ab_int4_m16_bm16.log
python scripts/probe_ab_configs.py int8_weight_only 16 14336x4096 3 "$(c 64 128 4 6)" "$(c 64 128 4 8)" "$(c 64 128 4 10)" "$(c 64 256 4 4)" "$(c 64 256 4 6)" "$(c 128 128 8 6)" "$(c 64 64 4 12)" 2>&1 | tee $OUT/ab_int8_m16_bm16.log
date -u
