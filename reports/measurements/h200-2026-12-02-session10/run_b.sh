#!/usr/bin/env bash
# H200 call B (session 10), the working tree as sent: the warpgroup-MMA kernel for bf16 and MXFP8 prefill slots
# (64- and 128-row CTAs), wired into the launcher. bench/moe_gemm_variants.cu (sm_90a, carried as
# .whl/moe_gemm_variants) at DSv3-prefill and small-K-MoE; the moe_gemm GPU tests; the same tests' wgmma cases
# under compute-sanitizer memcheck; bench/moe_gemm.py's prefill and small-K rows for bf16 and MXFP8.
# bash reports/measurements/h200-2026-12-02-session10/run_b.sh   (carry: .whl)
set -u
V=$PWD/.whl/moe_gemm_variants
R=/tmp/bout && mkdir -p $R
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-b GRAPHSAFE_SEARCH_DB=/tmp/gs-search-b
SECONDS=0
for shape in DSv3-prefill small-K-MoE; do
  GS_VARIANTS_SHAPE=$shape timeout 150 $V > "$R/b_variants_$shape.txt" 2>&1
  echo "variants $shape rc=$? ${SECONDS}s $(tail -1 $R/b_variants_$shape.txt)" | tee -a "$R/b_rc.txt"; SECONDS=0
done
PYTHONPATH=$PWD timeout 200 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 4 -q -p no:cacheprovider > "$R/b_gemm_tests.txt" 2>&1
echo "gemm gpu tests rc=$? ${SECONDS}s $(tail -1 $R/b_gemm_tests.txt)" | tee -a "$R/b_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 120 python3 bench/moe_gemm.py --fmt bf16 mxfp8 --shapes DSv3-prefill small-K-MoE --out $R/b_rows.csv > "$R/b_rows.txt" 2>&1
echo "bench rows rc=$? ${SECONDS}s" | tee -a "$R/b_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider \
  -k "bf16_prefill or e8m0_0_and_255 or (accuracy_and_determinism and (bf16 or mxfp8) and (64 or 128))" > "$R/b_memcheck.txt" 2>&1
echo "memcheck rc=$? ${SECONDS}s $(tail -1 $R/b_memcheck.txt)" | tee -a "$R/b_rc.txt"; SECONDS=0
cp $R/* "$OUT/" 2>/dev/null
