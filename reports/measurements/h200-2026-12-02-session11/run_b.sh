#!/usr/bin/env bash
# H200 call B (session 11), the working tree as sent (one A-register set again; block-FP8 at 6 stages): the
# variants at DSv3-prefill and small-K-MoE, every GPU-marked test of tests/, compute-sanitizer memcheck over the
# prefill tests of the quantized formats, `python -m bench moe_gemm`. Each step's output goes to $OUT as it
# finishes.
# bash reports/measurements/h200-2026-12-02-session11/run_b.sh   (carry: .whl, the variants binary built here)
set -u
V=$PWD/.whl/moe_gemm_variants
export PYTHONUNBUFFERED=1 GRAPHSAFE_CACHE_DIR=/tmp/gs-cache-b GRAPHSAFE_SEARCH_DB=/tmp/gs-search-b
git rev-parse HEAD > "$OUT/b_tree.txt"; git status --short >> "$OUT/b_tree.txt"; git diff | sha256sum >> "$OUT/b_tree.txt"
SECONDS=0
for shape in DSv3-prefill small-K-MoE; do
  GS_VARIANTS_SHAPE=$shape timeout 90 $V > "$OUT/b_variants_$shape.txt" 2>&1
  echo "variants $shape rc=$? ${SECONDS}s $(tail -1 $OUT/b_variants_$shape.txt)" | tee -a "$OUT/b_rc.txt"; SECONDS=0
done
PYTHONPATH=$PWD timeout 240 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider > /tmp/b_gpu_tests.txt 2>&1
echo "gpu tests rc=$? ${SECONDS}s $(tail -1 /tmp/b_gpu_tests.txt)" | tee -a "$OUT/b_rc.txt"; SECONDS=0
grep -E "FAILED|ERROR" /tmp/b_gpu_tests.txt | head -40 > "$OUT/b_failures.txt"; tail -40 /tmp/b_gpu_tests.txt > "$OUT/b_gpu_tests_tail.txt"
PYTHONPATH=$PWD timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest tests/test_moe_gemm_ops.py -m gpu -n 0 -q -p no:cacheprovider \
  -k "fast_and_exact or block_scale or e8m0_0_and_255 or scales_x_rows or exact_at_its_bounds or (accuracy_and_determinism and (mxfp4 or block_fp8) and (64 or 128))" > "$OUT/b_memcheck.txt" 2>&1
echo "memcheck rc=$? ${SECONDS}s $(tail -1 $OUT/b_memcheck.txt)" | tee -a "$OUT/b_rc.txt"; SECONDS=0
PYTHONPATH=$PWD timeout 90 python3 -m bench moe_gemm --out-dir /tmp/b_bench > "$OUT/b_bench.txt" 2>&1
echo "bench rc=$? ${SECONDS}s" | tee -a "$OUT/b_rc.txt"
