#!/usr/bin/env bash
# H200 call G (session 10), the working tree as sent: the MXFP8 wgmma kernel's fast form (the scale in the f16
# weights, a per-column offset) and its exact rest, launched as a pair for MXFP8 prefill slots.
# bench/moe_gemm_variants.cu (sm_90a, carried as .whl/moe_gemm_variants) at DSv3-prefill and small-K-MoE; the
# moe_gemm GPU tests; memcheck on the prefill cases; bench/moe_gemm.py's MXFP8 and bf16 prefill / small-K rows.
# bash reports/measurements/h200-2026-12-02-session10/run_g.sh   (carry: .whl)
set -u
V=$PWD/.whl/moe_gemm_variants
R=/tmp/gout && mkdir -p $R
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-g GRAPHSAFE_SEARCH_DB=/tmp/gs-search-g
SECONDS=0
for shape in DSv3-prefill small-K-MoE; do
  GS_VARIANTS_SHAPE=$shape timeout 150 $V > "$R/g_variants_$shape.txt" 2>&1
  echo "variants $shape rc=$? ${SECONDS}s $(tail -1 $R/g_variants_$shape.txt)" | tee -a "$R/g_rc.txt"; SECONDS=0
done
PYTHONPATH=$PWD timeout 200 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 4 -q -p no:cacheprovider > "$R/g_gemm_tests.txt" 2>&1
echo "gemm gpu tests rc=$? ${SECONDS}s $(tail -1 $R/g_gemm_tests.txt)" | tee -a "$R/g_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider \
  -k "bf16_prefill or fast_and_exact or e8m0_0_and_255 or scales_x_rows or propagates_nan or (accuracy_and_determinism and (bf16 or mxfp8) and (64 or 128))" > "$R/g_memcheck.txt" 2>&1
echo "memcheck rc=$? ${SECONDS}s $(tail -1 $R/g_memcheck.txt)" | tee -a "$R/g_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 120 python3 bench/moe_gemm.py --fmt mxfp8 bf16 --shapes DSv3-prefill small-K-MoE --out $R/g_rows.csv > "$R/g_rows.txt" 2>&1
echo "bench rows rc=$? ${SECONDS}s" | tee -a "$R/g_rc.txt"; SECONDS=0
cp $R/* "$OUT/" 2>/dev/null
