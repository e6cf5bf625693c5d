#!/bin/bash
# H200 call for the launcher's MXFP4 ring in the form run1 measured best (XS 2, 2 stages of 8 chunks, 4 n8 tiles,
# registers capped for 4 blocks per SM: kRingXsMxfp4's note in kernels/moe_gemm/moe_gemm.hip). Run from the root
# of an extracted `git archive` of the commit to measure, with PYTHONPATH set to it, like run1.sh:
#   cd /tmp/new && OUT=/tmp/kout P=run2 PYTHONPATH=/tmp/new bash reports/measurements/h200-2026-12-02-session6-kernels/run2.sh
# Six files into $OUT (prefix $P, default run2): tree (GPU, step times), tests, bench text and CSV, verify,
# variants. Expected about 95-110 s (run1's same steps: tests 34 s with the module build, verify 39 s, the
# variants 5 s per shape; the bench here has 3 shapes x 2 formats against run1's 5 x 4 in 10 s); every step has
# its own timeout (50, 15, 45, 3 x 10 s: 140 s in all at most; the nvcc build, 60 s at most, overlaps the tests).
set -o pipefail
export PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gscache
OUT=${OUT:-/tmp/out}
P=${P:-run2}
mkdir -p "$OUT"
SECONDS=0
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nproc; date -u; } > "$OUT/${P}_tree.txt"
# The variants binary builds while the tests run (its own nvcc process): its MXFP4 sweep times the op's launcher
# (op_launch, now XS 2 with 8 chunks) beside the same kernel launched directly, and its MXFP8 16-token sweep the
# 4-warp ring the launcher keeps against the 8-warp one (README: why MXFP8 stays).
( timeout 60 nvcc -x cu -O2 -std=c++17 -arch=sm_90 --fmad=false -I kernels/common -I kernels/moe_gemm -DGS_MOE_GEMM_MATH_ONLY \
    bench/moe_gemm_variants.cu -o /tmp/moe_gemm_variants_run2 > /tmp/variants_build_run2.txt 2>&1 ) &
VB=$!
timeout 50 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider 2>&1 | tail -40 > "$OUT/${P}_tests.txt"
echo "tests rc=$? ${SECONDS}s" >> "$OUT/${P}_tree.txt"; SECONDS=0
timeout 15 python3 -P -m bench.moe_gemm --fmt mxfp4 mxfp8 --shapes Hy4-TP8-decode Hy4-TP8-16tok DSv3-decode \
    --out "$OUT/${P}_moe_gemm.csv" > "$OUT/${P}_bench.txt" 2>&1
echo "bench rc=$? ${SECONDS}s" >> "$OUT/${P}_tree.txt"; SECONDS=0
timeout 45 python3 -m harness verify --backend gpu -k "moe_gemm" 2>&1 | tail -75 > "$OUT/${P}_verify.txt"
echo "verify rc=$? ${SECONDS}s" >> "$OUT/${P}_tree.txt"; SECONDS=0
wait $VB
{
  cat /tmp/variants_build_run2.txt
  for shape in Hy4-TP8-decode DSv3-decode Hy4-TP8-16tok; do
    echo "=== GS_VARIANTS_SHAPE=$shape"
    GS_VARIANTS_SHAPE=$shape timeout 10 /tmp/moe_gemm_variants_run2 2>&1
    echo "rc=$?"
  done
} > "$OUT/${P}_variants.txt" 2>&1
echo "variants ${SECONDS}s" >> "$OUT/${P}_tree.txt"
echo "done $(date -u)" >> "$OUT/${P}_tree.txt"
