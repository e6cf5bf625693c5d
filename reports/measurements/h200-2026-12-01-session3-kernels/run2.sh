#!/usr/bin/env bash
# Second H200 call: the ring kernel's MXFP4 fast path (scale folded into the f16 weights) and x in the e2m1
# pair order from gs_moe_prepare_rows. moe_gemm GPU tests, then the variants sweep at the two Hy4 decode shapes.
set -uo pipefail
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-$RANDOM
log=$OUT/log.txt
nvcc -x cu -O2 -std=c++17 -arch=sm_90 --fmad=false -I kernels/common -I kernels/moe_gemm -DGS_MOE_GEMM_MATH_ONLY \
  bench/moe_gemm_variants.cu -o /tmp/mgv >"$OUT/variants_build.txt" 2>&1 &
echo "== pytest -m gpu tests/test_moe_gemm_ops.py" >>"$log"
PYTHONPATH=. timeout 150 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider >>"$log" 2>&1
wait
for s in Hy4-TP8-decode DSv3-decode; do GS_VARIANTS_SHAPE=$s timeout 60 /tmp/mgv >>"$OUT/variants.txt" 2>&1; done
echo "== done" >>"$log"
