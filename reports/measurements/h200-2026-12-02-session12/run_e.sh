#!/usr/bin/env bash
# H200 call E (session 12), the working tree as sent (recorded in e_tree.txt): the quantized warpgroup-MMA
# prefill kernel with 3 warpgroups per CTA (NWG 3, 192 columns) against 2 in bench/moe_gemm_variants.cu at
# DSv3-prefill and small-K-MoE, the moe_gemm GPU tests with the launcher on NWG 3 for MXFP8 / MXFP4 at 128 rows,
# compute-sanitizer memcheck over the quantized prefill tests, `python -m bench moe_gemm`. The variants binary is
# built here with the nvcc line in its header and carried in .whl.
# bash reports/measurements/h200-2026-12-02-session12/run_e.sh   (carry: .whl)
set -u
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-e
git rev-parse HEAD > "$OUT/e_tree.txt"; git status --short >> "$OUT/e_tree.txt"; git diff | sha256sum >> "$OUT/e_tree.txt"
SECONDS=0
for shape in DSv3-prefill small-K-MoE; do
  GS_VARIANTS_SHAPE=$shape timeout 90 .whl/moe_gemm_variants > "$OUT/e_variants_$shape.txt" 2>&1
  echo "variants $shape rc=$? ${SECONDS}s $(tail -1 $OUT/e_variants_$shape.txt)" | tee -a "$OUT/e_rc.txt"; SECONDS=0
done
PYTHONPATH=$PWD timeout 200 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 8 -q -p no:cacheprovider > /tmp/e_gemm_tests.txt 2>&1
echo "gemm gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/e_gemm_tests.txt)" | tee -a "$OUT/e_rc.txt"; SECONDS=0
{ grep -E "FAILED|ERROR" /tmp/e_gemm_tests.txt | head -30; tail -3 /tmp/e_gemm_tests.txt; } > "$OUT/e_gemm_tests.txt"
PYTHONPATH=$PWD timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider \
  -k "fast_and_exact or block_scale or e8m0_0_and_255 or scales_x_rows or exact_at_its_bounds or (accuracy_and_determinism and (64 or 128))" > "$OUT/e_memcheck.txt" 2>&1
echo "memcheck rc=$? ${SECONDS}s $(tail -1 $OUT/e_memcheck.txt)" | tee -a "$OUT/e_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 80 python3 -m bench moe_gemm --out-dir /tmp/e_bench > "$OUT/e_bench.txt" 2>&1
echo "bench rc=$? ${SECONDS}s" | tee -a "$OUT/e_rc.txt"; SECONDS=0
