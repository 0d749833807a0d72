#!/usr/bin/env bash
# Round 27, call 11 (H100): how much the 16-row tiled weight layout would buy int4 today (the lever left for
# #6 at M = 1): the shipped row-major configs against the int4 grid's configs on the tiled layout.
set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 500 python scripts/probe_tiled_decode.py grid > $OUT/tiled_int4_grid.log 2>&1
echo "rc $?" >> $OUT/tiled_int4_grid.log
