#!/usr/bin/env bash
# H200 call A (session 10), the working tree as sent: the warpgroup-MMA (wgmma) bf16 prefill kernel.
# bench/moe_gemm_variants.cu built here for sm_90a (its header's nvcc line with -arch=sm_90a -DGS_SM90A=1,
# carried as .whl/moe_gemm_variants) at DSv3-prefill and small-K-MoE; the moe_gemm GPU tests (the module now
# builds for sm_90a, so bf16 prefill slots take the wgmma kernel); bench/moe_gemm.py's bf16 prefill rows.
# bash reports/measurements/h200-2026-12-02-session10/run_a.sh   (carry: .whl)
set -u
V=$PWD/.whl/moe_gemm_variants
R=/tmp/aout && mkdir -p $R
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-a GRAPHSAFE_SEARCH_DB=/tmp/gs-search-a
SECONDS=0
for shape in DSv3-prefill small-K-MoE; do
  GS_VARIANTS_SHAPE=$shape timeout 150 $V > "$R/a_variants_$shape.txt" 2>&1
  echo "variants $shape rc=$? ${SECONDS}s $(tail -1 $R/a_variants_$shape.txt)" | tee -a "$R/a_rc.txt"; SECONDS=0
done
PYTHONPATH=$PWD timeout 200 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 4 -q -p no:cacheprovider > "$R/a_gemm_tests.txt" 2>&1
echo "gemm gpu tests rc=$? ${SECONDS}s $(tail -1 $R/a_gemm_tests.txt)" | tee -a "$R/a_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 120 python3 bench/moe_gemm.py --fmt bf16 mxfp8 --shapes DSv3-prefill small-K-MoE --out $R/a_rows.csv > "$R/a_rows.txt" 2>&1
echo "bench rows rc=$? ${SECONDS}s" | tee -a "$R/a_rc.txt"; SECONDS=0
cp $R/* "$OUT/" 2>/dev/null
