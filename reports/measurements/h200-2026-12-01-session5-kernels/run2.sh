#!/bin/bash
# Call 2 of reports/measurements/h200-2026-12-01-session5-kernels (device tool `run`, repository root).
# Full-tile chunk loops (no per-m16-tile branch), fp8 4-chunk stages at 128 rows: the moe_gemm GPU tests, the prefill tilings of
# bench/moe_gemm_variants.cu at DSv3-prefill (mxfp8, bf16, mxfp4), bench/moe_gemm.py at the prefill shapes
# (block_m 128 at DSv3-prefill, then 64 for the A/B), and the prefill cases on the GPU backend. Outputs under $OUT.
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gscache
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/tree.txt"
( nvcc -x cu -O2 -std=c++17 -arch=sm_90 --fmad=false -I kernels/common -I kernels/moe_gemm -DGS_MOE_GEMM_MATH_ONLY \
    bench/moe_gemm_variants.cu -o /tmp/moe_gemm_variants > "$OUT/variants_build.txt" 2>&1 ) &
VB=$!
timeout ${T_TEST:-150} python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider 2>&1 | tail -40 | tee "$OUT/tests.txt"
wait $VB
GS_VARIANTS_SHAPE=DSv3-prefill timeout ${T_VAR:-80} /tmp/moe_gemm_variants 2>&1 | tee "$OUT/variants.txt"
{
timeout ${T_BENCH:-100} python3 -P -m bench.moe_gemm --fmt mxfp4 mxfp8 bf16 block_fp8 \
    --shapes DSv3-prefill small-K-MoE --out "$OUT/moe_gemm.csv" 2>&1
timeout ${T_BENCH2:-60} python3 -P -m bench.moe_gemm --fmt mxfp4 mxfp8 bf16 block_fp8 \
    --shapes DSv3-prefill --prefill-block-m 64 --out "$OUT/moe_gemm_bm64.csv" 2>&1
} | tee "$OUT/bench.txt"
timeout ${T_VERIFY:-60} python3 -m harness verify --backend gpu -k "moe_gemm and prefill" 2>&1 | tail -40 | tee "$OUT/verify.txt"
echo done
