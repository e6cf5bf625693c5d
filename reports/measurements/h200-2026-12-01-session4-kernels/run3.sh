#!/bin/bash
# Call 3 of reports/measurements/h200-2026-12-01-session4-kernels (device tool `run`, repository root).
# Builds, the moe_gemm GPU tests, bench/moe_gemm_variants.cu at Hy4-TP8-decode and Hy4-TP8-16tok, bench/moe_gemm.py at the
# issue-18 shapes, and the ring/decode/mxfp4 cases on the GPU backend. Outputs under $OUT.
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gscache
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
git log -1 --format='tree %H' > "$OUT/tree.txt" 2>/dev/null || true
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$OUT/tree.txt"
( nvcc -x cu -O2 -std=c++17 -arch=sm_90 --fmad=false -I kernels/common -I kernels/moe_gemm -DGS_MOE_GEMM_MATH_ONLY \
    bench/moe_gemm_variants.cu -o /tmp/moe_gemm_variants > "$OUT/variants_build.txt" 2>&1 ) &
VB=$!
timeout ${T_TEST:-110} python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider 2>&1 | tail -25 | tee "$OUT/tests.txt"
wait $VB
for SH in Hy4-TP8-decode Hy4-TP8-16tok; do GS_VARIANTS_SHAPE=$SH timeout ${T_VAR:-40} /tmp/moe_gemm_variants 2>&1 | tee "$OUT/variants_$SH.txt"; done
timeout ${T_BENCH:-150} python3 -P -m bench.moe_gemm --fmt mxfp4 mxfp8 bf16 \
    --shapes Hy4-TP8-decode Hy4-TP8-16tok DSv3-decode DSv3-prefill small-K-MoE --out "$OUT/moe_gemm.csv" 2>&1 | tee "$OUT/bench.txt"
timeout ${T_VERIFY:-50} python3 -m harness verify --backend gpu -k "moe_gemm and (ring or decode or mxfp4)" 2>&1 | tail -30 | tee "$OUT/verify.txt"
echo done
